const { request, cli } = require('./client')
const { serving } = require('./driver')
const { operatorOf } = require('./variants')
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

/** What an operator of `tenant` is shown: each answer is checked for other tenants' data (I8). */
async function observe(ctx, { tenant }) {
  if (ctx.unsubscribed.has(tenant)) return
  const proc = await serving(ctx)
  if (!proc) return
  for (const path of ['/statistics()', '/lagHistory()', '/PendingOutboxMessages?$select=ID,target,service,event']) {
    const res = await get(ctx, proc, tenant, path)
    ctx.history.observations.push({ tenant, kind: path, at: res.doneAt, status: res.status, body: res.body })
  }
  await deadLetters(ctx, proc, tenant)
}

module.exports = { operate, observe, deadLetters }
