/**
 * One repetition of the in-process measurements for one contender (BENCH_IMPL = plugin | baseline | cap | floor) on
 * one database (BENCH_DB), in a process of its own. BENCH_PART says which: 'core' (every scenario but the remote
 * one), 'drains' (the drain scenarios only: the extra fsync=off column) or 'remote' (the remote-call drain at
 * BENCH_CONCURRENCY, against the server at BENCH_REMOTE_URL). Sends its figures to the parent (IPC) and exits.
 */
const { boot, serve, impl } = require('./support/app')
const { MESSAGES, MIXED, now, fillBacklog, fillMixed, pending } = require('./support/messages')
const { drainFloors, remoteFloors, insertFloor } = require('./support/floor')
const { median, percentile } = require('./support/stats')

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

const config = JSON.parse(process.env.BENCH_CONFIG)
const part = process.env.BENCH_PART ?? 'core'

/** The handlers every scenario uses: `noop`, `write` (one row with CQL), `remote` (awaits the remote system), `ping`. */
async function registerHandlers(cds, srv, state) {
  const write = req => INSERT.into('perf.Records').entries({ ID: cds.utils.uuid(), n: req.data.n })
  srv.on('noop', () => {})
  srv.on('write', write)
  // the way the independent bench of issue 26 writes: through cds.db (the message's transaction all the same)
  srv.on('writeDb', req => cds.db.run(INSERT.into('perf.Records').entries({ ID: cds.utils.uuid(), n: req.data.n })))
  srv.on('ping', () => state.onPing?.(now()))
  if (cds.requires.Remote) {
    const remote = await cds.connect.to('Remote')
    srv.on('remote', () => remote.get('/ping'))
  }
  const mixed = []
  for (const { service, event } of MIXED) {
    const queued = await cds.connect.to(service)
    cds.unqueued(queued).on(event, event === 'write' ? write : () => {})
    mixed.push(queued)
  }
  return mixed
}

/**
 * flush(), then waits until the table is empty (verified by counting rows). CAP's flush() resolves after its first
 * chunk while its runner goes on by itself (`eager: false` measures that), and may not resolve when a pass is
 * already queued: it is given a second. `eager: true` calls flush() back to back instead, as a caller awaiting
 * flush() in a loop would; the plugin's flush() resolves only once nothing is left, so both modes are the same for it.
 * `queues`: the queued services whose flush() is called (CAP flushes one queue per call).
 */
async function untilEmpty(cds, queues, deadline, eager = true) {
  const flush = () => Promise.race([Promise.all(queues.map(q => q.flush())), sleep(1000)])
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

/** Drains the backlog `fill` wrote (`count` messages), timed from the trigger until the table is empty. */
async function drain(cds, queues, fill, count, eager) {
  await fill()
  const start = now()
  const cpu = process.cpuUsage()
  const { left, flushes } = await untilEmpty(cds, queues, start + config.drainTimeout, eager)
  return { ...drained(count, start, cpu, left), flushes }
}

/** The figures of a drain of `count` messages begun at `start` (and `cpu`), `left` of them still in the table. */
function drained(count, start, cpu, left) {
  const seconds = (now() - start) / 1000
  const used = process.cpuUsage(cpu)
  // CPU of this process per message: the contender's own cost, less sensitive to other load on the machine than msg/s
  return { perSecond: left === 0 ? count / seconds : NaN, seconds, left, cpuMicros: (used.user + used.system) / count }
}

/**
 * A backlog as an app makes one: `count` messages emitted through the queued service in one transaction, then one
 * `cds.flush()`, timed from the commit (a listener registered before the first emit runs before the queue's own)
 * until the table is empty. The plugin starts the messages it wrote claimed at the commit; CAP's runner goes on by
 * itself after its flush.
 */
async function drainEmitted(cds, queued, event, count) {
  let start
  let cpu
  await cds.tx(async () => {
    cds.context.on('succeeded', () => ((start = now()), (cpu = process.cpuUsage())))
    for (let n = 0; n < count; n++) await queued.emit(event, { n })
  })
  await Promise.race([cds.flush(), sleep(1000)])
  let left = await pending(cds)
  while (left > 0 && now() - start < config.drainTimeout) {
    await sleep(config.pollEvery)
    left = await pending(cds)
  }
  return drained(count, start, cpu, left)
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
  await untilEmpty(cds, [queued], now() + config.drainTimeout)
  const pairs = []
  for (let i = 0; i < samples; i++) {
    pairs.push(await pair(cds, queued, count, i))
    await untilEmpty(cds, [queued], now() + config.drainTimeout)
  }
  return overhead(pairs)
}

/** Enqueue cost while the runner drains a backlog: only pairs that finished before the backlog was gone count. */
async function enqueueWhileDraining(cds, queued, count, samples) {
  const pairs = []
  for (let round = 0; round < 5 && pairs.length < samples; round++) {
    await fillBacklog(cds, 'noop', config.smallBacklog)
    const started = untilEmpty(cds, [queued], now() + config.drainTimeout)
    while (pairs.length < samples) {
      const p = await pair(cds, queued, count, pairs.length)
      if ((await pending(cds)) === 0) break
      pairs.push(p)
    }
    await started
  }
  return overhead(pairs)
}

/** The durability settings the database runs with, as it reports them. */
async function durability(cds) {
  if (cds.db.kind === 'postgres') {
    const show = async name => Object.values((await cds.db.run(`SELECT current_setting('${name}') AS value`))[0])[0]
    return { fsync: await show('fsync'), synchronous_commit: await show('synchronous_commit') }
  }
  const pragma = async name => Object.values((await cds.db.run(`SELECT * FROM pragma_${name}`))[0])[0]
  const synchronous = ['OFF', 'NORMAL', 'FULL', 'EXTRA'][await pragma('synchronous')]
  return { journal_mode: await pragma('journal_mode'), synchronous }
}

/**
 * The drain scenarios: a no-op handler (in a fresh process, then again once the process has drained as many: a running
 * app's code is compiled by then), a handler writing one row, a mixed backlog of ten queues; then a backlog emitted
 * in one transaction and flushed once, with a no-op handler and one writing through cds.db.
 */
async function drains(cds, queued, mixed, result) {
  result.drainNoop = await drain(cds, [queued], () => fillBacklog(cds, 'noop', config.messages), config.messages, true)
  result.drainNoopWarm = await drain(cds, [queued], () => fillBacklog(cds, 'noop', config.messages), config.messages, true)
  result.drainWrite = await drain(cds, [queued], () => fillBacklog(cds, 'write', config.smallBacklog), config.smallBacklog, true)
  // The plugin's flush() drains every queue; CAP's flushes the queue of the service it is called on.
  const queues = impl() === 'cap' ? mixed : [queued]
  result.drainMixed = await drain(cds, queues, () => fillMixed(cds, config.smallBacklog), config.smallBacklog, true)
  result.drainNoopEmitted = await drainEmitted(cds, queued, 'noop', config.messages)
  result.drainWriteDbEmitted = await drainEmitted(cds, queued, 'writeDb', config.smallBacklog)
}

async function core(cds, srv, queued, mixed, state) {
  const result = { durability: await durability(cds) }
  await drains(cds, queued, mixed, result)
  result.drainNoopSelf = impl() === 'cap' ? await drain(cds, [queued], () => fillBacklog(cds, 'noop', config.smallBacklog), config.smallBacklog, false) : result.drainNoop
  result.latency = await latency(cds, queued, state, config.latencySamples)
  result.enqueueIdle1 = await enqueueIdle(cds, queued, 1, config.pairs1)
  result.enqueueIdle100 = await enqueueIdle(cds, queued, 100, config.pairs100)
  result.enqueueDraining1 = await enqueueWhileDraining(cds, queued, 1, config.pairs1)
  result.enqueueDraining100 = await enqueueWhileDraining(cds, queued, 100, config.pairs100)
  // A handler of the app's own on the queue table (an audit trail, a telemetry plugin): the plugin then writes new
  // rows through CQL, for it to see them (lib/cap/handlers.ts); CAP always writes through CQL.
  cds.db.before('CREATE', MESSAGES, () => {})
  result.enqueueWatched100 = await enqueueIdle(cds, queued, 100, config.pairs100)
  return result
}

async function floor(cds) {
  const { messages, smallBacklog, batchSize } = config
  if (part === 'remote') return { remote: await remoteFloors(cds, config.remoteMessages, batchSize, Number(process.env.BENCH_CONCURRENCY), process.env.BENCH_REMOTE_URL) }
  const result = { durability: await durability(cds), drains: await drainFloors(cds, smallBacklog, batchSize) }
  if (part === 'core') result.insertPerTransaction = await insertFloor(cds, Math.min(messages, smallBacklog))
  return result
}

async function main() {
  // CAP's runner keeps no timer referenced: keep the process alive until the figures are sent.
  setInterval(() => {}, 60_000)
  const { cds, srv, queued } = await boot()
  if (impl() === 'floor') return floor(cds)
  const state = {}
  const mixed = await registerHandlers(cds, srv, state)
  await serve(cds)
  if (part === 'remote') return { remote: await drain(cds, [queued], () => fillBacklog(cds, 'remote', config.remoteMessages), config.remoteMessages, true) }
  if (part === 'drains') {
    const result = { durability: await durability(cds) }
    await drains(cds, queued, mixed, result)
    return result
  }
  return core(cds, srv, queued, mixed, state)
}

main().then(
  result => process.send(result, () => process.exit(0)),
  e => {
    console.error(e)
    process.exit(1)
  }
)
