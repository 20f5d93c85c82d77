const { performance } = require('perf_hooks')

/**
 * The queue-table side of the bench, the same for every contender: a backlog written straight into
 * cds.outbox.Messages (the JSON is what both write for `emit(event, { n })`, so either runtime decodes it), and how
 * many rows are still pending.
 */

const MESSAGES = 'cds.outbox.Messages'
const BATCH = 1000

/** The mixed scenario: ten services on the named queues q0 … q9; even ones have a no-op handler, odd ones write a row. */
const MIXED = Array.from({ length: 10 }, (_, i) => ({ service: `Mixed${i}`, target: `q${i}`, event: i % 2 ? 'write' : 'noop' }))

const now = () => performance.now()
/** Wall-clock milliseconds with sub-millisecond resolution, comparable across processes on one machine. */
const wallClock = () => performance.timeOrigin + performance.now()

function row(cds, { service, target, event }, n, timestamp, withDueAt) {
  const msg = JSON.stringify({ 'cds.internal.user': 'anonymous', service, context: {}, event, data: { n }, headers: {} })
  const entry = { ID: cds.utils.uuid(), timestamp, target, msg, attempts: 0 }
  if (withDueAt) entry.dueAt = timestamp
  return entry
}

/** Writes `count` pending messages, due a second ago, in one transaction; `kinds` are taken in turn. */
async function fill(cds, kinds, count) {
  const withDueAt = 'dueAt' in cds.model.definitions[MESSAGES].elements
  const timestamp = new Date(Date.now() - 1000).toISOString()
  await cds.tx(async () => {
    for (let done = 0; done < count; done += BATCH) {
      const entries = []
      for (let n = done; n < Math.min(count, done + BATCH); n++) entries.push(row(cds, kinds[n % kinds.length], n, timestamp, withDueAt))
      await INSERT.into(MESSAGES).entries(entries)
    }
  })
}

/** `count` pending `event` messages of the Bench service on the default queue. */
const fillBacklog = (cds, event, count) => fill(cds, [{ service: 'Bench', target: 'queue', event }], count)

/** `count` pending messages spread over the ten queues of MIXED, interleaved. */
const fillMixed = (cds, count) => fill(cds, MIXED, count)

async function pending(cds) {
  const result = await cds.tx(() => SELECT.one.from(MESSAGES).columns('count(*) as n'))
  return Number(result.n)
}

module.exports = { MESSAGES, MIXED, now, wallClock, fillBacklog, fillMixed, pending }
