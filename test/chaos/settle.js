const { request } = require('./client')
const { CHAOS } = require('./driver')
const { withSlot, startSlot } = require('./faults')
const { deadLetters } = require('./operators')
const { queueSettings, byQueue } = require('./queues')
const state = require('./state')
const { driverOf } = require('./variants')
const { settleConsumer, consumerDeadLetters, consumerFinal } = require('./consumer-side')
const { now } = require('./app/srv/true-clock')

/**
 * Settling: faults stop, every slot runs again with the true clock, recurring tasks are unscheduled, and the queue is
 * drained — `cds.flush()` in every process, until the table reaches a fixed point where only dead letters (and what
 * a dead head of a 'block' key holds back) remain. No progress for STALL ms is the end too: what is left then is
 * stuck, and I1 says which messages.
 */

const STALL = 60_000
const LIMIT = 4 * 60_000
/** A fixed point: nothing open, and the table unchanged this long (retention may still delete a blocking head). */
const STABLE = 3000

/** Whether a row is a dead letter by CAP's columns: its attempts reached its queue's maxAttempts. */
function isDead(row, settings) {
  return row.attempts >= (byQueue(settings, row.target)?.maxAttempts ?? Infinity)
}

/** Rows behind a dead head of their key on a 'block' queue: they wait for an operator, by design. */
function isBlocked(row, rows, settings) {
  if (!row.orderingKey || byQueue(settings, row.target)?.ordering !== 'block') return false
  return rows.some(r => r.orderingKey === row.orderingKey && r.target === row.target && r.tenant === row.tenant && r.timestamp < row.timestamp && isDead(r, settings))
}

/**
 * Rows still to be processed: neither dead letters nor blocked behind one. Recurring tasks are not waited for: the
 * checker unscheduled them, and one that keeps recurring anyway is I14's to report.
 */
function openRows(rows, settings) {
  return rows.filter(r => !r.task && !isDead(r, settings) && !isBlocked(r, rows, settings))
}

async function everySlotUp(ctx) {
  await ctx.databaseUp
  ctx.skews.clear()
  await Promise.all(ctx.plan.slots.map(slot => withSlot(ctx, slot, async () => {
    if (ctx.fleet.current.get(slot)?.record.skew) await ctx.fleet.terminate(slot)
    if (!ctx.fleet.current.get(slot)) await startSlot(ctx, slot)
  }, { fault: false })))
  await Promise.all((ctx.plan.consumer?.slots ?? []).map(slot => withSlot(ctx, slot, async () => {
    if (!ctx.consumers.current.get(slot)) await startSlot(ctx, slot, ctx.consumers)
  }, { fault: false })))
}

async function unscheduleTasks(ctx) {
  const scheduled = new Map(ctx.history.schedules.map(s => [`${s.tenant} ${s.task}`, s]))
  for (const { tenant, task } of scheduled.values()) {
    const proc = ctx.fleet.live()[0]
    if (!proc || ctx.unsubscribed.has(tenant)) continue
    const res = await request(`${proc.url}${CHAOS}/unscheduleTask`, 'POST', driverOf(tenant), { task })
    ctx.history.schedules.push({ kind: 'unschedule', tenant, task, settling: true, ...res })
  }
}

async function flushAll(ctx) {
  const tenant = ctx.database.tenants.find(t => !ctx.unsubscribed.has(t))
  await Promise.all(ctx.fleet.live().map(proc => request(`${proc.url}${CHAOS}/flush`, 'POST', driverOf(tenant), {})))
}

async function drain(ctx) {
  const settings = queueSettings(ctx.plan.requires, ctx.maxAttempts)
  const begin = now()
  let last
  let lastChange = now()
  for (;;) {
    await flushAll(ctx)
    const rows = await state.rows(ctx.database)
    const open = openRows(rows, settings)
    const signature = JSON.stringify(rows.filter(r => !r.task).map(r => [r.ID, r.attempts, r.status, r.claimedBy, r.dueAt]))
    if (signature !== last) [last, lastChange] = [signature, now()]
    else if (open.length === 0 && now() - lastChange >= STABLE) return { drained: true, ms: now() - begin }
    else if (now() - lastChange > STALL || now() - begin > LIMIT) return { drained: false, ms: now() - begin, open }
    await ctx.fleet.changed(500)
  }
}

/** Settles, reads the final state, and stops every process (timed, for I9). */
async function settle(ctx) {
  ctx.stopping = true
  await Promise.allSettled([...ctx.inFlight])
  ctx.history.phase.settleStart = now()
  await everySlotUp(ctx)
  await unscheduleTasks(ctx)
  const drained = await drain(ctx)
  ctx.history.phase.drained = now()
  // the consumer's turn once the producer relayed what it could
  const consumerDrained = ctx.consumers && (await settleConsumer(ctx))
  ctx.history.phase.consumerDrained = now()
  const proc = ctx.fleet.live()[0]
  const visible = {}
  for (const tenant of ctx.database.tenants) {
    if (!ctx.unsubscribed.has(tenant) && proc) visible[tenant] = await deadLetters(ctx, proc, tenant)
  }
  const consumerVisible = ctx.consumers && (await consumerDeadLetters(ctx))
  await Promise.all([ctx.fleet.stopAll(), ctx.consumers?.stopAll()])
  ctx.history.phase.end = now()
  // read once nothing runs any more: the rows and the records are one state
  const final = { drained, rows: await state.rows(ctx.database), ...(await state.records(ctx.database)), visible }
  if (ctx.consumers) final.consumer = { drained: consumerDrained, visible: consumerVisible, ...(await consumerFinal(ctx)) }
  // whether an unsubscribed tenant's database came back (I12), once nothing runs any more
  final.tenantFiles = Object.fromEntries((ctx.plan.variant.tenants ?? []).map(t => [t, ctx.database.exists(t)]))
  return final
}

module.exports = { settle, isDead, isBlocked, openRows }
