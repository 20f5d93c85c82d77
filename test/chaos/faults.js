const pgServer = require('../../scripts/postgres-server')
const redis = require('./redis')
const { now } = require('./app/srv/true-clock')

/**
 * The fault injector: kill -9 and graceful restarts of app processes, restarts with a skewed clock, a PostgreSQL
 * restart, and a rolling restart with another `maxAttempts`; with the consumer half also app processes paused
 * (SIGSTOP … SIGCONT), consumer processes killed, and the broker frozen, killed and restarted, and given another
 * password for a while. Faults on one slot run one after another, and so do the broker's; a process is only started
 * while the database is up (a start during an outage is not what is being tested).
 */

const wait = ms => new Promise(resolve => setTimeout(resolve, ms))

/**
 * Waits until every other slot serves (at most `patience` ms): a fault takes down one process at a time, so with
 * several processes one is always there to take over, however slowly a loaded machine starts them.
 */
async function othersServing(ctx, slot, patience = 30_000, fleet = ctx.fleet) {
  const end = now() + patience
  const slots = fleet === ctx.fleet ? ctx.plan.slots : ctx.plan.consumer.slots
  const others = () => slots.filter(s => s !== slot).every(s => fleet.live().some(p => p.record.slot === s))
  while (!others()) {
    if (now() > end || ctx.stopping) return false
    await fleet.changed()
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

async function startSlot(ctx, slot, fleet = ctx.fleet) {
  await ctx.databaseUp
  await fleet.start(slot, { skew: ctx.skews.get(slot) ?? 0 })
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
    await wait(down)
    await startSlot(ctx, slot)
  })
}

function terminate(ctx, { slot, down }) {
  return withSlot(ctx, slot, async () => {
    if (!(await othersServing(ctx, slot)) || !(await ctx.fleet.terminate(slot))) return
    await wait(down)
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
    await wait(hold)
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
    await wait(down)
    await pgServer.restartServer(ctx.database.server)
  } finally {
    outage.to = now()
    ctx.outage = false
    up()
  }
}

const fleetOf = (ctx, app) => (app === 'consumer' ? ctx.consumers : ctx.fleet)

/**
 * SIGSTOP for `hold` ms, then SIGCONT: longer than a lease (8 s) or `claimAfter`, so other processes take over what it
 * held while it stood still, and then it goes on where it stopped.
 */
function pause(ctx, { app, slot, hold }) {
  const fleet = fleetOf(ctx, app)
  return withSlot(ctx, slot, async () => {
    if (!(await othersServing(ctx, slot, undefined, fleet))) return
    const record = fleet.pause(slot)
    if (!record) return
    const child = fleet.current.get(slot)
    const paused = { app, slot, pid: record.pid, from: now() }
    ctx.history.pauses.push(paused)
    await wait(hold)
    fleet.resume(child)
    paused.to = now()
  })
}

/** Which inbox rows a killed consumer held (its claims in the consumer's database). */
async function heldByConsumer(ctx, pid) {
  try {
    const rows = await ctx.consumerDb.query(`SELECT ID AS "ID" FROM cds_outbox_Messages WHERE status = 'processing' AND claimedBy LIKE ?`, [`%:${pid}:%`])
    return rows.map(r => r.ID)
  } catch {
    return null
  }
}

/** kill -9 of a consumer process: what it had read from the broker and not acknowledged stays pending for it. */
function consumerKill(ctx, { slot, down }) {
  return withSlot(ctx, slot, async () => {
    const victim = await ctx.consumers.kill(slot)
    if (!victim) return
    ctx.history.consumerKills.push({ pid: victim.pid, slot, at: now(), held: await heldByConsumer(ctx, victim.pid) })
    await wait(down)
    await startSlot(ctx, slot, ctx.consumers)
  })
}

/** Broker faults run one at a time, under the lock of the pseudo slot 'broker'. */
function brokerFault(ctx, kind, fn) {
  return withSlot(ctx, 'broker', async () => {
    const fault = { kind, persistence: ctx.redis.persistence, from: now() }
    ctx.history.brokerFaults.push(fault)
    try {
      await fn()
    } finally {
      fault.to = now()
    }
  })
}

/** A partition as the apps see it: Redis stops answering (SIGSTOP), their connections stay open; then SIGCONT. */
const brokerFreeze = (ctx, { hold }) => brokerFault(ctx, 'freeze', async () => {
  redis.freeze(ctx.redis)
  await wait(hold)
  redis.thaw(ctx.redis)
})

/** Redis killed (SIGKILL) and started again after `down` ms: with its append-only file it keeps what it acknowledged. */
const brokerKill = (ctx, { down }) => brokerFault(ctx, 'kill', async () => {
  await redis.kill(ctx.redis)
  await wait(down)
  await redis.restart(ctx.redis)
})

/** The broker's password changed (every client disconnected) while the apps still have the old one; then fixed. */
const brokerPassword = (ctx, { hold }) => brokerFault(ctx, 'password', async () => {
  const restore = await redis.rotatePassword(ctx.redis)
  await wait(hold)
  await restore()
})

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

module.exports = { kill, terminate, skew, pgRestart, changeMaxAttempts, pause, consumerKill, brokerFreeze, brokerKill, brokerPassword, withSlot, startSlot }
