/**
 * The consumer half of a seed's plan (generator 31, issue 31): the producer (test/chaos/app) publishes events on its
 * messaging service `broker` (redis-streams, queued by default, keyed events with sequence numbers), a consumer app
 * (test/chaos/consumer, 1–2 processes, a database of its own) takes them in through its inbox and offers an
 * `@idempotent` action; Redis is the seed's own. Faults of this half: app processes paused beyond their lease
 * (SIGSTOP/SIGCONT), consumer processes killed, Redis frozen, killed (with or without its append-only file) and its
 * password changed and changed back; the PostgreSQL restart of the producer's plan hits both apps' databases.
 */

const MB = 1024 * 1024
const EVENT_KEYS = ['k1', 'k2', 'k3', 'k4', 'k5', 'k6']
/** The consumer's inbox refuses messages above this (test/chaos/consumer/package.json, `maxMessageSize`). */
const CONSUMER_MAX_MESSAGE = 1 * MB

/** How the consumer side is set up: processes, broker durability, `claimAfter`, the test mode. */
function setup(r, { variant }) {
  return {
    slots: variant.db === 'sqlite' ? ['X'] : ['X', 'Y'].slice(0, r.int(1, 2)),
    persistence: r.chance(0.6),
    claimAfter: r.pick(['1s', '2s', '2s', '5s']),
    deliverTwice: r.chance(0.2)
  }
}

/** One event of a business transaction: keyed orders (sequence numbers), unkeyed audit records. */
function event(r, wid) {
  if (r.chance(0.6)) return { wid, service: 'broker', topic: 'chaos/orders', orderKey: r.pick(EVENT_KEYS) }
  return { wid, service: 'broker', topic: 'chaos/audit' }
}

/** Business transactions that publish events, some also queueing a call of Clerk, some rolled back. */
function events(r, { duration }) {
  const out = []
  let n = 0
  for (let at = r.int(0, 300); at < duration; at += r.int(150, 450)) {
    const messages = Array.from({ length: r.int(1, 4) }, () => event(r, `e${++n}`))
    if (r.chance(0.2)) messages.push({ wid: `e${++n}`, service: 'Clerk' })
    out.push({ at, kind: 'enqueue', messages, rollback: r.chance(0.15) })
  }
  return out
}

/**
 * Documents: in some seeds a few larger than the consumer's inbox takes (the producer's limit is 4 MB; a consumer may
 * cap its own lower), in some a burst of large ones the consumer can take, read in its batches of entries.
 */
function documents(r, { duration }) {
  const out = []
  if (r.chance(0.4)) {
    for (let i = r.int(1, 3); i > 0; i--) {
      const size = r.int(CONSUMER_MAX_MESSAGE + 100_000, 2 * MB)
      out.push({ at: r.int(1000, duration - 4000), kind: 'enqueue', messages: [{ wid: `doc-over${i}`, service: 'broker', topic: 'chaos/documents', size }], rollback: false })
    }
  }
  if (r.chance(0.2)) {
    const start = r.int(2000, duration / 2)
    for (let i = 0; i < 40; i += 4) {
      const messages = Array.from({ length: 4 }, (_, j) => ({ wid: `doc${i + j}`, service: 'broker', topic: 'chaos/documents', size: r.int(600_000, 900_000) }))
      out.push({ at: start + (i / 4) * 200, kind: 'enqueue', messages, rollback: false })
    }
  }
  return out
}

/**
 * Transfers between two accounts of Ledger (keyed by account), in pairs that run at the same time in opposite
 * directions: A→B queues A's message then B's, B→A the other way round, as a banking app books both legs.
 */
function transfers(r, { duration }) {
  const out = []
  const accounts = ['l1', 'l2', 'l3', 'l4']
  for (let i = r.int(2, 6), n = 0; i > 0; i--) {
    const at = r.int(500, duration - 2000)
    const from = r.pick(accounts)
    const to = r.pick(accounts.filter(a => a !== from))
    const leg = (key, wid) => ({ wid, service: 'Ledger', orderKey: key })
    out.push({ at, kind: 'enqueue', messages: [leg(from, `t${++n}`), leg(to, `t${++n}`)], rollback: false })
    out.push({ at: at + r.int(0, 20), kind: 'enqueue', messages: [leg(to, `t${++n}`), leg(from, `t${++n}`)], rollback: false })
  }
  return out
}

/** Calls of the consumer's @idempotent action, each with a key of its own; some sent twice at once. */
function credits(r, { duration }) {
  const out = []
  let n = 0
  for (let at = r.int(500, 2000); at < duration; at += r.int(800, 2500)) {
    out.push({ at, kind: 'credit', ref: `c${++n}`, account: r.pick(['a1', 'a2', 'a3']), amount: r.int(1, 100), twice: r.chance(0.25) })
  }
  return out
}

/** The faults of the consumer half, at random times of the fault phase. */
function faults(r, { duration, slots }, consumer) {
  const out = []
  const at = () => r.int(1500, duration - 4000)
  // paused longer than a lease (8 s) or `claimAfter`: others take over what it holds, then it goes on
  if (r.chance(0.5)) out.push({ at: at(), kind: 'pause', app: 'app', slot: r.pick(slots), hold: r.int(9000, 14_000) })
  if (r.chance(0.4)) out.push({ at: at(), kind: 'pause', app: 'consumer', slot: r.pick(consumer.slots), hold: r.int(9000, 14_000) })
  if (r.chance(0.5)) out.push({ at: at(), kind: 'consumerKill', slot: r.pick(consumer.slots), down: r.int(300, 3000) })
  if (r.chance(0.5)) out.push({ at: at(), kind: 'brokerFreeze', hold: r.int(5000, 12_000) })
  if (r.chance(0.5)) out.push({ at: at(), kind: 'brokerKill', down: r.int(1000, 4000) })
  if (r.chance(0.35)) out.push({ at: at(), kind: 'brokerPassword', hold: r.int(3000, 8000) })
  return out
}

/** The consumer half of a plan: its setup and its timed events (merged into the plan's by plan.js). */
function consumerHalf(r, context) {
  const consumer = setup(r.fork('setup'), context)
  const events_ = [
    ...events(r.fork('events'), context),
    ...documents(r.fork('documents'), context),
    ...transfers(r.fork('transfers'), context),
    ...credits(r.fork('credits'), context),
    ...faults(r.fork('faults'), context, consumer)
  ]
  return { consumer, events: events_ }
}

module.exports = { consumerHalf, CONSUMER_MAX_MESSAGE }
