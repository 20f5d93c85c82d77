const { performance } = require('perf_hooks')

/**
 * The queue-table side of the bench, the same for both contenders: a backlog written straight into
 * cds.outbox.Messages (the JSON is what both write for `emit(event, { n })`, so either runtime decodes it), and how
 * many rows are still pending.
 */

const MESSAGES = 'cds.outbox.Messages'
const BATCH = 1000

const now = () => performance.now()
/** Wall-clock milliseconds with sub-millisecond resolution, comparable across processes on one machine. */
const wallClock = () => performance.timeOrigin + performance.now()

function row(cds, event, n, timestamp, withDueAt) {
  const msg = JSON.stringify({ 'cds.internal.user': 'anonymous', service: 'Bench', context: {}, event, data: { n }, headers: {} })
  const entry = { ID: cds.utils.uuid(), timestamp, target: 'queue', msg, attempts: 0 }
  if (withDueAt) entry.dueAt = timestamp
  return entry
}

/** Writes `count` pending `event` messages, due a second ago, in one transaction. */
async function fillBacklog(cds, event, count) {
  const withDueAt = 'dueAt' in cds.model.definitions[MESSAGES].elements
  const timestamp = new Date(Date.now() - 1000).toISOString()
  await cds.tx(async () => {
    for (let done = 0; done < count; done += BATCH) {
      const entries = []
      for (let n = done; n < Math.min(count, done + BATCH); n++) entries.push(row(cds, event, n, timestamp, withDueAt))
      await INSERT.into(MESSAGES).entries(entries)
    }
  })
}

async function pending(cds) {
  const result = await cds.tx(() => SELECT.one.from(MESSAGES).columns('count(*) as n'))
  return Number(result.n)
}

module.exports = { MESSAGES, now, wallClock, fillBacklog, pending }
