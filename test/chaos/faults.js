const pgServer = require('../../scripts/postgres-server')
const { now } = require('./app/srv/true-clock')

/**
 * The fault injector: kill -9 and graceful restarts of app processes, restarts with a skewed clock, a PostgreSQL
 * restart, and a rolling restart with another `maxAttempts`. Faults on one slot run one after another; a process
 * is only started while the database is up (a start during an outage is not what is being tested).
 */

const pause = ms => new Promise(resolve => setTimeout(resolve, ms))

/**
 * Waits until every other slot serves (at most `patience` ms): a fault takes down one process at a time, so with
 * several processes one is always there to take over, however slowly a loaded machine starts them.
 */
async function othersServing(ctx, slot, patience = 30_000) {
  const end = now() + patience
  const others = () => ctx.plan.slots.filter(s => s !== slot).every(s => ctx.fleet.live().some(p => p.record.slot === s))
  while (!others()) {
    if (now() > end || ctx.stopping) return false
    await ctx.fleet.changed()
  }
  return true
}

/**
 * Runs `fn` after whatever else is being done to `slot`. A fault whose turn comes only after the fault phase ended
 * is dropped (`fault: true`): faults do not spill into settling.
 */
function withSlot(ctx, slot, fn, { fault = true } = {}) {
  const previous = ctx.slotLocks.get(slot) ?? Promise.resolve()
  const run = () => (fault && ctx.stopping ? undefined : fn())
  const next = previous.then(run, run)
  ctx.slotLocks.set(slot, next.catch(() => {}))
  return next
}

async function startSlot(ctx, slot) {
  await ctx.databaseUp
  await ctx.fleet.start(slot, { skew: ctx.skews.get(slot) ?? 0 })
}

/** Which messages the killed process held: the only ones whose lost attempt its takeover may count (I5). */
async function heldBy(ctx, pid) {
  try {
    const sql = `SELECT ID AS "ID" FROM cds_outbox_Messages WHERE status = 'processing' AND claimedBy LIKE ?`
    const held = []
    for (const tenant of ctx.database.tenants) if (ctx.database.exists?.(tenant) ?? true) held.push(...(await ctx.database.query(sql, [`%:${pid}:%`], tenant)).map(r => r.ID))
    return held
  } catch {
    return null // the database is down: unknown
  }
}

function kill(ctx, { slot, down }) {
  return withSlot(ctx, slot, async () => {
    if (!(await othersServing(ctx, slot))) return
    const victim = await ctx.fleet.kill(slot)
    if (!victim) return
    const at = now()
    ctx.history.kills.push({ pid: victim.pid, slot, at, held: await heldBy(ctx, victim.pid) })
    await pause(down)
    await startSlot(ctx, slot)
  })
}

function terminate(ctx, { slot, down }) {
  return withSlot(ctx, slot, async () => {
    if (!(await othersServing(ctx, slot)) || !(await ctx.fleet.terminate(slot))) return
    await pause(down)
    await startSlot(ctx, slot)
  })
}

/** A host whose clock is off by `skew` ms: the slot's process is restarted with it, then again with the true clock. */
function skew(ctx, { slot, skew, hold }) {
  return withSlot(ctx, slot, async () => {
    if (!(await othersServing(ctx, slot))) return
    ctx.skews.set(slot, skew)
    await ctx.fleet.terminate(slot)
    await startSlot(ctx, slot)
    const record = { slot, skew, from: now(), pid: ctx.fleet.current.get(slot)?.pid }
    ctx.history.skews.push(record)
    await pause(hold)
    ctx.skews.delete(slot)
    await ctx.fleet.terminate(slot)
    record.to = now()
    await startSlot(ctx, slot)
  })
}

/** PostgreSQL goes away (fast shutdown: sessions end) for `down` ms and comes back on the same port and data. */
async function pgRestart(ctx, { down }) {
  if (ctx.database.kind !== 'postgres' || ctx.outage) return
  const outage = { from: now() }
  ctx.history.outages.push(outage)
  let up
  ctx.outage = true
  ctx.databaseUp = new Promise(resolve => (up = resolve))
  try {
    await pgServer.haltServer(ctx.database.server)
    outage.halted = now()
    await pause(down)
    await pgServer.restartServer(ctx.database.server)
  } finally {
    outage.to = now()
    ctx.outage = false
    up()
  }
}

/** A new release with another `maxAttempts` for the default queue, rolled out one process after another. */
async function changeMaxAttempts(ctx, { value }) {
  ctx.maxAttempts = value
  ctx.history.maxAttempts.push({ at: now(), value })
  for (const slot of ctx.plan.slots) {
    await withSlot(ctx, slot, async () => {
      await ctx.fleet.terminate(slot)
      await startSlot(ctx, slot)
    })
  }
}

module.exports = { kill, terminate, skew, pgRestart, changeMaxAttempts, withSlot, startSlot }
