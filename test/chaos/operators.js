const { request, cli } = require('./client')
const { serving } = require('./driver')
const { operatorOf } = require('./variants')
const state = require('./state')
const { now } = require('./app/srv/true-clock')

/**
 * Operators: the shipped operator service (`EventQueuesService`, README "Dead letters and operations") over OData,
 * and the CLI run beside the app. Every action is recorded with its time window and answer; what it was shown (the
 * dead letters listed before acting, every answer of an observing operator) too, for I1 and I8.
 */

const OPS = '/odata/v4/event-queues'

async function get(ctx, proc, tenant, path) {
  return request(proc.url + OPS + path, 'GET', operatorOf(tenant))
}

/** The dead letters an operator sees now. */
async function deadLetters(ctx, proc, tenant) {
  const res = await get(ctx, proc, tenant, '/DeadOutboxMessages?$select=ID,target,service,event,attempts&$orderby=timestamp')
  const ids = res.status === 200 ? res.body.value.map(r => r.ID) : []
  ctx.history.observations.push({ tenant, kind: 'dead', at: res.doneAt, status: res.status, body: res.body, ids })
  return ids
}

function cliFilter(filter = {}) {
  return Object.entries(filter).flatMap(([name, value]) => [`--${name}`, value])
}

async function byId(ctx, proc, { via, action, tenant, pick }) {
  const ids = await deadLetters(ctx, proc, tenant)
  if (!ids.length) return { skipped: 'no dead letters' }
  const ID = ids[Math.floor(pick * ids.length)]
  const res = via === 'cli'
    ? await cli([action, ID], ctx.configOf('cli'))
    : await request(`${proc.url}${OPS}/DeadOutboxMessages(${ID})/EventQueuesService.${action}`, 'POST', operatorOf(tenant), {})
  return { ids: [ID], ...res }
}

async function bulk(ctx, proc, { via, action, filter, tenant }) {
  if (action === 'purge') return cli(['purge', '--older-than', '1s'], ctx.configOf('cli'))
  if (via === 'cli') return cli([action.replace('All', ''), '--all', ...cliFilter(filter)], ctx.configOf('cli'))
  return request(`${proc.url}${OPS}/${action}`, 'POST', operatorOf(tenant), filter ?? {})
}

async function operate(ctx, event) {
  if (ctx.unsubscribed.has(event.tenant)) return
  const proc = await serving(ctx)
  if (!proc) return
  const record = { action: event.action, via: event.via, filter: event.filter, tenant: event.tenant, pid: proc.pid, from: now() }
  const res = ['revive', 'delete'].includes(event.action) ? await byId(ctx, proc, event) : await bulk(ctx, proc, event)
  if (res.skipped) return
  ctx.history.operator.push({ ...record, ...res, to: now() })
}

/** The reads the ops page makes (ops-page/page.js), with the header its reads carry. */
const PAGE_READS = ['/statistics()', '/lagHistory()', '/DeadOutboxMessages?$count=true&$top=50&$select=ID,target,service,event,attempts,lastError&$orderby=timestamp']
const PAGE_HEADERS = { 'x-event-queues-page': 'read' }

/**
 * What an operator of `tenant` is shown on every surface — the operator service, the ops page's reads and the CLI's
 * `status` — each answer with the counts of the tenant's own rows per queue, read from its database right before and
 * right after: I8 checks the answers for other tenants' names and for counts beyond the tenant's own.
 */
async function observe(ctx, { tenant }) {
  if (ctx.unsubscribed.has(tenant)) return
  const proc = await serving(ctx)
  if (!proc) return
  const before = await state.countsOf(ctx.database, tenant).catch(() => undefined)
  const answers = []
  for (const path of ['/statistics()', '/lagHistory()', '/PendingOutboxMessages?$select=ID,target,service,event']) {
    const res = await get(ctx, proc, tenant, path)
    answers.push({ tenant, kind: path, surface: 'odata', at: res.doneAt, sentAt: res.sentAt, status: res.status, body: res.body })
  }
  for (const path of PAGE_READS) {
    const res = await request(proc.url + OPS + path, 'GET', operatorOf(tenant), undefined, PAGE_HEADERS)
    answers.push({ tenant, kind: path, surface: 'page', at: res.doneAt, sentAt: res.sentAt, status: res.status, body: res.body })
  }
  const status = await cli(['status', '--json', '--tenant', tenant], ctx.configOf('cli'))
  answers.push({ tenant, kind: 'cli status', surface: 'cli', at: status.doneAt, sentAt: status.sentAt, status: status.code === 0 ? 200 : 500, body: parsed(status.output), output: status.output.slice(0, 2000) })
  const after = await state.countsOf(ctx.database, tenant).catch(() => undefined)
  for (const answer of answers) ctx.history.observations.push({ ...answer, counts: before && after && { before, after } })
  await deadLetters(ctx, proc, tenant)
}

/** The CLI's `--json` output as `{ value }` (the shape of an OData answer), or undefined. */
function parsed(output) {
  const start = output.indexOf('[')
  try {
    return start >= 0 ? { value: JSON.parse(output.slice(start)) } : undefined
  } catch {
    return undefined
  }
}

module.exports = { operate, observe, deadLetters }
