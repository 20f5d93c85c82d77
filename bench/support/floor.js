const { now } = require('./messages')

/**
 * The database's floor for the work of a scenario, measured with the same app, database and pool: what any queue
 * must at least spend when it commits once per message, or once per batch of messages. Rows of the business table
 * stand in for queue rows: each message's row is deleted in its transaction (with raw SQL through `cds.db.run`),
 * beside what the scenario's handler would do there (a CQL INSERT) or before it (a remote call).
 */

const TABLE = 'perf_Records'

/** `sql` with `?` placeholders as the database wants them. */
function placeholders(cds, sql) {
  let n = 0
  return cds.db.kind === 'postgres' ? sql.replace(/\?/g, () => `$${++n}`) : sql
}

async function freshRows(cds, count) {
  const IDs = Array.from({ length: count }, () => cds.utils.uuid())
  await cds.tx(async () => {
    for (let i = 0; i < count; i += 1000) await INSERT.into('perf.Records').entries(IDs.slice(i, i + 1000).map(ID => ({ ID, n: 0 })))
  })
  return IDs
}

/** At most `size` holders at a time; the others wait in line. */
function semaphore(size) {
  let free = size
  const waiting = []
  return async fn => {
    if (free > 0) free--
    else await new Promise(resolve => waiting.push(resolve))
    try {
      return await fn()
    } finally {
      const next = waiting.shift()
      if (next) next()
      else free++
    }
  }
}

/** Transactions at once: @cap-js/postgres's pool has 10 connections; more would only wait for one (and time out). */
const POOL = 10

/**
 * Rows per second: `messages` rows, `workers` taking `perTx` of them at a time. Per message `outside(ID)` runs before
 * its transaction (one after another within a worker, as a slot runs a batch); in the transaction `inside(ID)` runs
 * per message (in a savepoint each when `savepoints`), then the chunk's rows are deleted in one statement.
 */
async function floorRate(cds, { messages, perTx, workers = 10, outside, inside, savepoints = false }) {
  const IDs = await freshRows(cds, messages)
  const inPool = semaphore(POOL)
  const start = now()
  const worker = async () => {
    for (let chunk = IDs.splice(0, perTx); chunk.length; chunk = IDs.splice(0, perTx)) {
      if (outside) for (const ID of chunk) await outside(ID)
      await inPool(() => cds.tx(async () => {
        for (const ID of chunk) {
          if (!inside) continue
          if (savepoints) await cds.db.run('SAVEPOINT message')
          await inside(ID)
          if (savepoints) await cds.db.run('RELEASE SAVEPOINT message')
        }
        await cds.db.run(placeholders(cds, `DELETE FROM ${TABLE} WHERE ID IN (${chunk.map(() => '?').join(', ')})`), chunk)
      }))
    }
  }
  await Promise.all(Array.from({ length: workers }, worker))
  return messages / ((now() - start) / 1000)
}

/** The handler's work of the writing scenario: one row, with CQL. */
const writeOne = cds => () => INSERT.into('perf.Records').entries({ ID: cds.utils.uuid(), n: 1 })

/** Floors of the drain scenarios (no-op and writing handler), per message and per batch of `batchSize`. */
async function drainFloors(cds, messages, batchSize) {
  return {
    noopPerMessage: await floorRate(cds, { messages, perTx: 1 }),
    noopPerBatch: await floorRate(cds, { messages, perTx: batchSize }),
    writePerMessage: await floorRate(cds, { messages, perTx: 1, inside: writeOne(cds) }),
    writePerBatch: await floorRate(cds, { messages, perTx: batchSize, inside: writeOne(cds), savepoints: true })
  }
}

/** Floor of the remote-call scenario: `concurrency` workers, each awaits the remote call, then commits. */
async function remoteFloors(cds, messages, batchSize, concurrency, url) {
  const call = async () => {
    const response = await fetch(`${url}/ping`)
    await response.arrayBuffer()
  }
  return {
    perMessage: await floorRate(cds, { messages, perTx: 1, workers: concurrency, outside: call }),
    perBatch: await floorRate(cds, { messages, perTx: Math.min(batchSize, Math.ceil(messages / concurrency)), workers: concurrency, outside: call })
  }
}

/** The enqueue side's floor: one raw INSERT per transaction, one transaction at a time. */
async function insertFloor(cds, messages) {
  const start = now()
  for (let i = 0; i < messages; i++) {
    await cds.tx(() => cds.db.run(placeholders(cds, `INSERT INTO ${TABLE} (ID, n) VALUES (?, 0)`), [cds.utils.uuid()]))
  }
  return messages / ((now() - start) / 1000)
}

module.exports = { drainFloors, remoteFloors, insertFloor }
