/**
 * One repetition of the in-process measurements for one contender (BENCH_IMPL = plugin | cap | floor) on one
 * database (BENCH_DB), in a process of its own. Sends its figures to the parent (IPC) and exits.
 */
const { boot, serve, impl } = require('./support/app')
const { now, fillBacklog, pending } = require('./support/messages')
const { median, percentile } = require('./support/stats')

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

const config = JSON.parse(process.env.BENCH_CONFIG)

/** Handlers on the Bench service: `noop`, `write` (one row into the business table), `ping` (reports its start). */
function registerHandlers(cds, srv, state) {
  srv.on('noop', () => {})
  srv.on('write', req => INSERT.into('perf.Records').entries({ ID: cds.utils.uuid(), n: req.data.n }))
  srv.on('ping', () => state.onPing?.(now()))
}

/**
 * flush(), then waits until the table is empty (verified by counting rows). CAP's flush() resolves after its first
 * chunk while its runner goes on by itself (`eager: false` measures that), and may not resolve when a pass is
 * already queued: it is given a second. `eager: true` calls flush() back to back instead, as a caller awaiting
 * flush() in a loop would; the plugin's flush() resolves only once nothing is left, so both modes are the same for it.
 */
async function untilEmpty(cds, queued, deadline, eager = true) {
  const flush = () => Promise.race([queued.flush(), sleep(1000)])
  let flushes = 1
  await flush()
  let left = await pending(cds)
  let progressAt = now()
  while (left > 0 && now() < deadline) {
    const before = left
    if (eager) {
      flushes++
      await flush()
    } else await sleep(config.pollEvery)
    left = await pending(cds)
    if (left < before) progressAt = now()
    else if (now() - progressAt > 1000) {
      flushes++
      await flush()
      progressAt = now()
    }
  }
  return { left, flushes }
}

/** Drains `count` pending messages, timed from the trigger until the table is empty. */
async function drain(cds, queued, event, count, eager) {
  await fillBacklog(cds, event, count)
  const start = now()
  const { left, flushes } = await untilEmpty(cds, queued, start + config.drainTimeout, eager)
  const seconds = (now() - start) / 1000
  return { perSecond: left === 0 ? count / seconds : NaN, seconds, left, flushes }
}

/** Commit-to-handler latency: one message per transaction, the next one after the handler started. */
async function latency(cds, queued, state, samples) {
  const values = []
  for (let n = 0; n < samples; n++) {
    let committedAt
    const started = new Promise(resolve => (state.onPing = resolve))
    await cds.tx(async () => {
      // Registered before the emit, so it runs before the queue's own 'succeeded' listener: the commit instant.
      cds.context.on('succeeded', () => (committedAt = now()))
      await queued.emit('ping', { n })
    })
    const startedAt = await started
    values.push(startedAt - committedAt)
  }
  return { p50: percentile(values, 50), p99: percentile(values, 99), samples: values.length }
}

async function timed(fn) {
  const start = now()
  await fn()
  return now() - start
}

const emits = (cds, queued, count) => () =>
  cds.tx(async () => {
    for (let n = 0; n < count; n++) await queued.emit('noop', { n })
  })

const inserts = (cds, count) => () =>
  cds.tx(async () => {
    for (let n = 0; n < count; n++) await INSERT.into('perf.Records').entries({ ID: cds.utils.uuid(), n })
  })

/** One pair of samples (emit transaction, insert transaction), in alternating order. */
async function pair(cds, queued, count, i) {
  const emit = emits(cds, queued, count)
  const insert = inserts(cds, count)
  if (i % 2) {
    const e = await timed(emit)
    return { emit: e, insert: await timed(insert) }
  }
  const p = await timed(insert)
  return { emit: await timed(emit), insert: p }
}

function overhead(pairs) {
  const emit = median(pairs.map(p => p.emit))
  const insert = median(pairs.map(p => p.insert))
  return { emit, insert, ratio: emit / insert, samples: pairs.length }
}

/** Enqueue cost with nothing else to do: each emit transaction's messages are processed before the next sample. */
async function enqueueIdle(cds, queued, count, samples) {
  for (let i = 0; i < 3; i++) await pair(cds, queued, count, i) // warm-up
  await untilEmpty(cds, queued, now() + config.drainTimeout)
  const pairs = []
  for (let i = 0; i < samples; i++) {
    pairs.push(await pair(cds, queued, count, i))
    await untilEmpty(cds, queued, now() + config.drainTimeout)
  }
  return overhead(pairs)
}

/** Enqueue cost while the runner drains a backlog: only pairs that finished before the backlog was gone count. */
async function enqueueWhileDraining(cds, queued, count, samples) {
  const pairs = []
  for (let round = 0; round < 5 && pairs.length < samples; round++) {
    await fillBacklog(cds, 'noop', config.smallBacklog)
    const started = untilEmpty(cds, queued, now() + config.drainTimeout)
    while (pairs.length < samples) {
      const p = await pair(cds, queued, count, pairs.length)
      if ((await pending(cds)) === 0) break
      pairs.push(p)
    }
    await started
  }
  return overhead(pairs)
}

async function floor(cds) {
  const messages = config.smallBacklog
  const table = 'perf_Records'
  const prepare = sql => (cds.db.kind === 'postgres' ? sql.replace('?', '$1') : sql)
  const fill = async () => {
    const IDs = Array.from({ length: messages }, () => cds.utils.uuid())
    await cds.tx(async () => {
      for (let i = 0; i < messages; i += 1000) await INSERT.into('perf.Records').entries(IDs.slice(i, i + 1000).map(ID => ({ ID, n: 0 })))
    })
    return IDs
  }
  const deleteRow = ID => cds.db.run(prepare(`DELETE FROM ${table} WHERE ID = ?`), [ID])
  // One row per transaction, 10 transactions at a time: what a queue with a transaction per message must at least do.
  const IDs = await fill()
  let start = now()
  const worker = async () => {
    for (let ID = IDs.pop(); ID; ID = IDs.pop()) await cds.tx(() => deleteRow(ID))
  }
  await Promise.all(Array.from({ length: 10 }, worker))
  const perTransaction = messages / ((now() - start) / 1000)
  /** Rows per second deleting fresh rows `size` per transaction, each with `deleteOne`. */
  const perChunk = async (size, deleteOne) => {
    const IDs = await fill()
    const start = now()
    for (let i = 0; i < messages; i += size) {
      const chunk = IDs.slice(i, i + size)
      await cds.tx(async () => {
        for (const ID of chunk) await deleteOne(ID)
      })
    }
    return messages / ((now() - start) / 1000)
  }
  // 100 rows per transaction: the same deletes, batched.
  const batched = await perChunk(100, deleteRow)
  // 50 rows per transaction, each DELETE inside its own savepoint: the floor of a batched dispatch that isolates handlers.
  const savepoints = await perChunk(50, async ID => {
    await cds.db.run('SAVEPOINT message')
    await deleteRow(ID)
    await cds.db.run('RELEASE SAVEPOINT message')
  })
  // The enqueue side's floor: one raw INSERT per transaction.
  start = now()
  const inserts = messages
  for (let i = 0; i < inserts; i++) {
    await cds.tx(() => cds.db.run(prepare(`INSERT INTO ${table} (ID, n) VALUES (?, 0)`), [cds.utils.uuid()]))
  }
  const insertPerTransaction = inserts / ((now() - start) / 1000)
  return { deletePerTransaction: perTransaction, deleteBatched: batched, deleteSavepoints: savepoints, insertPerTransaction }
}

async function main() {
  // CAP's runner keeps no timer referenced: keep the process alive until the figures are sent.
  setInterval(() => {}, 60_000)
  const { cds, srv, queued } = await boot()
  if (impl() === 'floor') return { floor: await floor(cds) }
  const state = {}
  registerHandlers(cds, srv, state)
  await serve(cds)
  const result = {}
  result.drainNoop = await drain(cds, queued, 'noop', config.messages, true)
  result.drainNoopSelf = impl() === 'cap' ? await drain(cds, queued, 'noop', config.smallBacklog, false) : result.drainNoop
  result.drainWrite = await drain(cds, queued, 'write', config.smallBacklog, true)
  result.latency = await latency(cds, queued, state, config.latencySamples)
  result.enqueueIdle1 = await enqueueIdle(cds, queued, 1, config.pairs1)
  result.enqueueIdle100 = await enqueueIdle(cds, queued, 100, config.pairs100)
  result.enqueueDraining1 = await enqueueWhileDraining(cds, queued, 1, config.pairs1)
  result.enqueueDraining100 = await enqueueWhileDraining(cds, queued, 100, config.pairs100)
  return result
}

main().then(
  result => process.send(result, () => process.exit(0)),
  e => {
    console.error(e)
    process.exit(1)
  }
)
