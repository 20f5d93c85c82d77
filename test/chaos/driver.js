const { request } = require('./client')
const { driverOf } = require('./variants')
const { now } = require('./app/srv/true-clock')

/**
 * The workload driver: the app's clients, calling its HTTP API on a process that serves at that moment. Each
 * request is recorded with what it asked and what it was told: committed (204), rolled back as planned (409
 * PLANNED_ROLLBACK), failed otherwise, or cut off (no answer) — the last two are settled later by the database,
 * where the enqueuing transaction's own `Intents` rows say whether it committed.
 */

const CHAOS = '/odata/v4/chaos'

/**
 * A process of `fleet` (the producer's, or the consumer's) serving now, chosen by the run's random stream. While none
 * serves, a client waits a little and then gives up (requests piling up behind a restart would all arrive in the
 * same second).
 */
async function serving(ctx, patience = 2000, fleet = ctx.fleet) {
  const end = now() + patience
  for (;;) {
    const live = fleet.live()
    if (live.length) return ctx.runtime.pick(live)
    if (now() > end || ctx.stopping) return undefined
    await fleet.changed()
  }
}

function outcomeOf(res, rollback) {
  if (res.status === -1) return 'skipped'
  if (res.status === 204 || res.status === 200) return 'committed'
  if (res.status === 409 && rollback && JSON.stringify(res.body).includes('PLANNED_ROLLBACK')) return 'rolledBack'
  return res.status === 0 ? 'cut' : 'failed'
}

/** `patience`: how long to wait for a serving process; the scenario's own events (an import, a task) wait long. */
async function call(ctx, tenant, path, body, patience) {
  const proc = await serving(ctx, patience)
  if (!proc) return { proc, res: { status: -1, error: 'no process served', sentAt: now(), doneAt: now() } }
  return { proc, res: await request(proc.url + path, 'POST', driverOf(tenant), body) }
}

async function enqueue(ctx, { tenant, messages, rollback }) {
  if (ctx.unsubscribed.has(tenant)) return
  const large = messages.some(m => m.size > 1_000_000)
  const { proc, res } = await call(ctx, tenant, `${CHAOS}/enqueue`, { messages, rollback }, large ? 60_000 : undefined)
  ctx.history.requests.push({ kind: 'enqueue', tenant, messages, rollback, pid: proc?.pid, ...res, outcome: outcomeOf(res, rollback) })
}

/** Rows in CAP's format, written with CQL by the app (not through cds.queued). */
async function importRows(ctx, { rows }) {
  const { proc, res } = await call(ctx, undefined, `${CHAOS}/importRows`, { rows }, 60_000)
  const messages = rows.map(r => ({ ...r, foreign: true }))
  ctx.history.requests.push({ kind: 'import', messages, rollback: false, pid: proc?.pid, ...res, outcome: outcomeOf(res, false) })
}

async function schedule(ctx, event) {
  const { tenant, kind, task, every, version, ms } = event
  const path = kind === 'schedule' ? `${CHAOS}/scheduleTask` : `${CHAOS}/unscheduleTask`
  const { res } = await call(ctx, tenant, path, kind === 'schedule' ? { task, every, version, ms } : { task }, 60_000)
  ctx.history.schedules.push({ kind, tenant, task, every, version, ...res })
}

/** CAP 9.9's own row of a recurring task, as the built-in queue left it before the plugin was added. */
async function legacyTask(ctx, { tenant, task, every }) {
  const { res } = await call(ctx, tenant, `${CHAOS}/importCapTask`, { task, every }, 60_000)
  ctx.history.schedules.push({ kind: 'legacy', tenant, task, every: `${every}ms`, version: 0, ...res })
}

/** SaaS provisioning, as the subscription manager calls it. */
async function provision(ctx, tenant, subscribe) {
  const url = `/-/cds/saas-provisioning/tenant/${tenant}`
  const proc = await serving(ctx, 60_000)
  if (!proc) return { status: -1 }
  const body = subscribe ? { subscribedSubdomain: tenant, eventType: 'CREATE' } : undefined
  return request(proc.url + url, subscribe ? 'PUT' : 'DELETE', 'yves', body)
}

async function unsubscribe(ctx, { tenant }) {
  ctx.unsubscribed.add(tenant)
  const res = await provision(ctx, tenant, false)
  ctx.history.unsubscribes.push({ tenant, ...res })
  // its database is gone: the checker reads it no more (I12 checks that it stays gone)
  if (res.status >= 200 && res.status < 300) ctx.database.tenants = ctx.database.tenants.filter(t => t !== tenant)
}

module.exports = { enqueue, importRows, schedule, legacyTask, provision, unsubscribe, serving, CHAOS }
