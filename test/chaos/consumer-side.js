const { request } = require('./client')
const { serving } = require('./driver')
const { merged } = require('./queues')
const redis = require('./redis')
const { pidOfClaim } = require('./state')
const { requires: CONSUMER } = require('./consumer/package.json').cds
const { now } = require('./app/srv/true-clock')

/**
 * The consumer half of a seed at run time: the consumer app's configuration, the calls of its @idempotent action,
 * its settling (the broker and the inbox drained), and what the checker reads back of it, its broker and its
 * receipts.
 */

const CONSUMER_PATH = '/odata/v4/consumer'
const OPS = '/odata/v4/event-queues'
/** The consumer's group in Redis: redis-streams names it after the app (test/chaos/consumer/package.json). */
const GROUP = require('./consumer/package.json').name
/** The producer's topics, the consumer's subscriptions (test/chaos/consumer/srv/consumer.js). */
const TOPICS = ['chaos/orders', 'chaos/audit', 'chaos/documents']
/** Settling of the consumer: no progress this long ends it (what is left is stuck, and the invariants say what). */
const STALL = 45_000
const STABLE = 3000

const brokerUrl = server => `redis://default:${server.password}@${server.host}:${server.port}`

/** The `broker` service of the producer: the seed's Redis; without a consumer half the app has no broker. */
function producerBroker(ctx) {
  if (!ctx.redis) return false
  return { credentials: { uri: brokerUrl(ctx.redis) } }
}

/** CDS_CONFIG of the consumer's processes. */
function consumerConfig(ctx) {
  const { plan, consumerDb } = ctx
  const queue = merged({ store: plan.variant.store }, plan.consumer.deliverTwice ? { deliver: 'twice' } : {})
  const messaging = { credentials: { uri: brokerUrl(ctx.redis) }, claimAfter: plan.consumer.claimAfter }
  return { requires: { db: { ...consumerDb.config }, queue: merged(CONSUMER.queue, queue), messaging: merged(CONSUMER.messaging, messaging) } }
}

/**
 * A call of the consumer's @idempotent action as a client makes it: with an Idempotency-Key of its own, retried
 * with the same key when no answer came or the server failed (a client does not know whether it was booked);
 * `twice`: the same call sent to two processes at once, as a client that timed out and retried at once.
 */
async function credit(ctx, { ref, account, amount, twice }) {
  const key = `"credit-${ctx.plan.seed}-${ref}"`
  const send = async concurrent => {
    for (let attempt = 1; attempt <= 3; attempt++) {
      const proc = await serving(ctx, 3000, ctx.consumers)
      if (!proc) return
      const res = await request(`${proc.url}${CONSUMER_PATH}/credit`, 'POST', 'driver', { ref, account, amount }, { 'Idempotency-Key': key })
      ctx.history.credits.push({ ref, key, pid: proc.pid, attempt, concurrent, ...res })
      if (res.status > 0 && res.status < 500) return
    }
  }
  await Promise.all(twice ? [send(false), send(true)] : [send(false)])
}

async function flushConsumers(ctx) {
  await Promise.all(ctx.consumers.live().map(proc => request(`${proc.url}${CONSUMER_PATH}/flush`, 'POST', 'driver', {})))
}

/** Per stream, the consumer group's backlog: entries not delivered yet (`lag`) and delivered but not acknowledged. */
async function backlog(server) {
  return redis.withClient(server, async client => {
    const out = {}
    for (const stream of TOPICS) {
      const groups = await client.sendCommand(['XINFO', 'GROUPS', stream]).catch(() => [])
      const info = groups.map(fieldsOf).find(g => g.name === GROUP)
      out[stream] = info ? { pending: Number(info.pending), lag: info.lag === null ? null : Number(info.lag) } : { pending: 0, lag: 0 }
    }
    return out
  })
}

/** XINFO's flat [name, value, …] reply (RESP2) or map (RESP3) as an object. */
function fieldsOf(reply) {
  if (!Array.isArray(reply)) return reply instanceof Map ? Object.fromEntries(reply) : reply
  const out = {}
  for (let i = 0; i + 1 < reply.length; i += 2) out[reply[i]] = reply[i + 1]
  return out
}

const CONSUMER_ROWS = `SELECT ID AS "ID", target AS "target", attempts AS "attempts", status AS "status", claimedBy AS "claimedBy",
  substr(lastError, 1, 300) AS "lastError", substr(msg, 1, 300) AS "head" FROM cds_outbox_Messages`

/**
 * Settles the consumer once the producer has: its processes serve again, and it is flushed until the broker holds
 * nothing for its group (no lag, nothing pending), its inbox holds nothing but dead letters, and nothing changed for
 * a while; or until it made no progress for STALL ms.
 */
async function settleConsumer(ctx) {
  const { maxAttempts } = CONSUMER.queue
  const begin = now()
  let last
  let lastChange = now()
  for (;;) {
    await flushConsumers(ctx)
    let state
    try {
      const rows = await ctx.consumerDb.query(CONSUMER_ROWS)
      const [{ n }] = await ctx.consumerDb.query('SELECT COUNT(*) AS "n" FROM consumer_Applied')
      state = { rows, applied: Number(n), backlog: await backlog(ctx.redis) }
    } catch (e) {
      state = { error: e.message }
    }
    const signature = JSON.stringify(state)
    const open = state.rows?.filter(r => r.attempts < maxAttempts) ?? [1]
    const waiting = Object.values(state.backlog ?? {}).some(b => b.pending > 0 || b.lag !== 0)
    if (signature !== last) [last, lastChange] = [signature, now()]
    else if (!open.length && !waiting && now() - lastChange >= STABLE) return { drained: true, ms: now() - begin }
    else if (now() - lastChange > STALL) return { drained: false, ms: now() - begin, state }
    await ctx.consumers.changed(500)
  }
}

/** The consumer's dead letters as its operators see them. */
async function consumerDeadLetters(ctx) {
  const proc = ctx.consumers.live()[0]
  if (!proc) return []
  const res = await request(`${proc.url}${OPS}/DeadOutboxMessages?$select=ID,target,service,event,attempts,lastError`, 'GET', 'ops')
  return res.status === 200 ? res.body.value : []
}

/** What the checker reads of the consumer half once every process stopped. */
async function consumerFinal(ctx) {
  const db = ctx.consumerDb
  const applied = (await db.query('SELECT eventID AS "eventID", wid AS "wid", topic AS "topic", orderKey AS "orderKey", sequence AS "sequence", previous AS "previous", pid AS "pid", at AS "at" FROM consumer_Applied'))
    .map(a => ({ ...a, sequence: a.sequence === null ? null : Number(a.sequence), previous: a.previous === null ? null : Number(a.previous), pid: Number(a.pid), at: Number(a.at) }))
  const credits = await db.query('SELECT ID AS "ID", ref AS "ref", pid AS "pid", at AS "at" FROM consumer_Credits')
  const receipts = (await db.query('SELECT scope AS "scope", ID AS "ID", state AS "state", duplicates AS "duplicates", recordedAt AS "recordedAt" FROM cds_outbox_Receipts'))
    .map(r => ({ ...r, duplicates: Number(r.duplicates ?? 0) }))
  const rows = (await db.query(CONSUMER_ROWS)).map(r => ({ ...r, attempts: Number(r.attempts), pid: pidOfClaim(r.claimedBy) }))
  const broker = {}
  for (const stream of TOPICS) broker[stream] = await redis.entries(ctx.redis, stream).catch(() => [])
  return { applied, credits, receipts, rows, broker, backlog: await backlog(ctx.redis).catch(e => ({ error: e.message })) }
}

module.exports = { producerBroker, consumerConfig, credit, settleConsumer, consumerDeadLetters, consumerFinal }
