/**
 * `node bench/broker.js` (part of `npm run bench`; `npm run build` first): relay throughput to a real broker, this
 * plugin's `kind: 'redis-streams'` beside CAP's built-in queue with CAP's `redis-messaging` (the plugin not loaded), in
 * the same run, interleaved, on durable databases (a SQLite file; a database of the embedded PostgreSQL server with its
 * durable defaults). A `redis-server` is started on 127.0.0.1 by this script (scripts/redis-server.js, no persistence:
 * CAP's pub/sub keeps nothing anyway) and stopped by its PID.
 *
 * Per database, events per transaction (1 and 100) and contender, a producer process (the bench app, bench/app) with a
 * messaging service `broker`, queued by default, commits transactions one after the other, each emitting its events;
 * right after each commit it takes the commit time (a 'succeeded' listener registered before the transaction's first
 * emit, so it runs before the queue's own). The bench process itself is the consumer: it reads the plugin's stream
 * with XREAD BLOCK, or is subscribed to CAP's channel before the producer starts, and stamps each event's arrival.
 * Measured:
 * - throughput: events ÷ (last event's arrival at the bench's reader − start of the first transaction): commit to
 *   broker acceptance, the producer committing as fast as it can;
 * - commit → consumer p50/p99: an event's arrival at the bench's reader − its transaction's commit time.
 * The plugin's entries are also counted in the stream (XLEN) after each run. Before measuring, each producer relays a
 * warm-up on another topic and waits until its queue table is empty. It measures; it does not pass or fail.
 *
 * About 5 minutes on the loaded 2-core machine (load 11–15) with the defaults. Sizes via environment: BENCH_BROKER_EVENTS_1 (events
 * of the 1-per-transaction runs, 200), BENCH_BROKER_EVENTS_100 (of the 100-per-transaction runs, 1500), BENCH_REPS (2),
 * BENCH_DBS ("sqlite,postgres"), BENCH_BROKER_PROFILE ("0": no profile; "1": always; default: only when the target,
 * ≥ 5× CAP's throughput and a p99 below CAP's p50, is missed; then the plugin's producer runs once more per database
 * under V8's CPU profiler, over the measured window). Writes the table to bench/BROKER.md.
 */
const fs = require('fs')
const os = require('os')
const path = require('path')

const config = {
  events: { 1: Number(process.env.BENCH_BROKER_EVENTS_1 ?? 200), 100: Number(process.env.BENCH_BROKER_EVENTS_100 ?? 1500) },
  perTx: [1, 100],
  reps: Number(process.env.BENCH_REPS ?? 2),
  dbs: (process.env.BENCH_DBS ?? 'sqlite,postgres').split(','),
  warmUp: 20,
  /** How long the bench waits for the last event at its reader before it records what arrived. */
  arrivalTimeout: 180_000,
  profile: process.env.BENCH_BROKER_PROFILE
}
const IMPLS = ['plugin', 'cap']
/** The runs profiled when the target is missed: the two ends, SQLite's batches and PostgreSQL's single events. */
const PROFILED = [['sqlite', 100], ['postgres', 1]]
const PASSWORD = 'bench' // CAP's adapter drops the host of a credentials.uri without user and password (see README)
const log = (...args) => console.error('[bench:broker]', ...args)

/** The broker service of a contender: the plugin's redis-streams, or CAP's redis-messaging (pub/sub). */
const brokerService = (impl, redis) => ({ kind: impl === 'cap' ? 'redis-messaging' : 'redis-streams', credentials: { uri: redis.url } })

/** Child: the producer. Relays a warm-up, then on 'go' commits the transactions and sends their commit times. */
async function child() {
  setInterval(() => {}, 60_000) // keep alive until the figures are sent
  const { boot, serve } = require('./support/app')
  const { wallClock, pending } = require('./support/messages')
  const { cds } = await boot()
  const broker = await cds.connect.to('broker')
  await serve(cds)
  const topic = process.env.BENCH_TOPIC
  const perTx = Number(process.env.BENCH_PER_TX)
  const count = Number(process.env.BENCH_COUNT)

  /** `total` events on `event`, `perTx` per transaction; the commit time of each transaction in `commits`. */
  const transactions = async (event, total, commits) => {
    for (let tx = 0, n = 0; n < total; tx++) {
      await cds.tx(async () => {
        cds.context.on('succeeded', () => (commits[tx] = wallClock()))
        for (let i = 0; i < perTx && n < total; i++, n++) await broker.emit(event, { tx, n })
      })
    }
  }
  await transactions(`${topic}/warm-up`, Math.min(perTx * 2, 200), [])
  const end = Date.now() + 60_000
  while ((await pending(cds)) > 0) {
    if (Date.now() > end) throw new Error('the warm-up was not relayed within 60 s')
    await new Promise(resolve => setTimeout(resolve, 50))
  }
  const go = new Promise(resolve => process.once('message', resolve))
  process.send({ ready: true })
  await go
  const profiler = process.env.BENCH_PROFILE_FILE && (await profiling())
  const commits = []
  const startAt = wallClock()
  await transactions(topic, count, commits)
  const endAt = wallClock()
  // this process exits once it sent its figures: it stays until its relay is done (the profile covers exactly that)
  while ((await pending(cds)) > 0) await new Promise(resolve => setTimeout(resolve, 20))
  if (profiler) fs.writeFileSync(process.env.BENCH_PROFILE_FILE, JSON.stringify(await profiler.stop()))
  await new Promise(resolve => process.send({ commits, startAt, endAt }, resolve))
}

/**
 * V8's CPU profiler (what `node --cpu-prof` runs) started now through the inspector, so the profile leaves out the
 * producer's start (model compilation, module loading), which would otherwise be most of it.
 */
async function profiling() {
  const { Session } = require('inspector')
  const session = new Session()
  session.connect()
  const post = (method, params) => new Promise((resolve, reject) => session.post(method, params, (e, r) => (e ? reject(e) : resolve(r))))
  await post('Profiler.enable')
  await post('Profiler.start')
  return { stop: async () => (await post('Profiler.stop')).profile }
}

/**
 * The bench's consumer of `topic`: the plugin's stream read with XREAD BLOCK from its start, or CAP's channel,
 * subscribed before it resolves. Stamps each event's arrival by its transaction (`arrivals`: [tx, at] pairs).
 */
async function reader(redis, impl, topic) {
  const { createClient } = require('redis')
  const { readReply } = require('../lib/messaging/stream-entries')
  const { wallClock } = require('./support/messages')
  const client = createClient({ url: redis.url })
  await client.connect()
  const arrivals = []
  const take = (json, at) => arrivals.push([JSON.parse(json).data.tx, at])
  let closed = false
  let loop = Promise.resolve()
  if (impl === 'cap') {
    await client.subscribe(topic, message => take(message, wallClock()))
  } else {
    loop = (async () => {
      let last = '0-0'
      while (!closed) {
        const entries = readReply(await client.sendCommand(['XREAD', 'COUNT', '1000', 'BLOCK', '200', 'STREAMS', topic, last]))
        const at = wallClock()
        for (const entry of entries) {
          take(entry.fields.message, at)
          last = entry.id
        }
      }
    })()
  }
  return {
    arrivals,
    /** Resolves when `count` events arrived or `timeout` ms passed. */
    async received(count, timeout) {
      const end = Date.now() + timeout
      while (arrivals.length < count && Date.now() < end) await new Promise(resolve => setTimeout(resolve, 20))
    },
    async close() {
      closed = true
      await loop
      await client.quit()
    }
  }
}

/** XLEN of `topic` on the server: the plugin's entries the broker holds. */
async function streamLength(redis, topic) {
  const { createClient } = require('redis')
  const client = createClient({ url: redis.url })
  await client.connect()
  try {
    return Number(await client.sendCommand(['XLEN', topic]))
  } finally {
    await client.quit()
  }
}

/** One run: a fresh database, the reader, the producer; `profileFile`: the producer profiles the measured window into it. */
async function measure({ kind, impl, perTx, rep, server, redis, profileFile }) {
  const { newDatabase } = require('./support/databases')
  const { environment } = require('./support/app')
  const { start, nextMessage, stop } = require('./support/processes')
  const { percentile } = require('./support/stats')
  const count = config.events[perTx]
  const topic = `bench/${kind}/${impl}/${perTx}/${rep}`
  const { db, cleanup } = await newDatabase(kind, server)
  const consumer = await reader(redis, impl, topic)
  const extra = { BENCH_BROKER_CHILD: 'yes', BENCH_TOPIC: topic, BENCH_PER_TX: String(perTx), BENCH_COUNT: String(count), BENCH_PROFILE_FILE: profileFile ?? '' }
  const producer = start('broker.js', environment(impl, db, extra, { requires: { broker: brokerService(impl, redis) } }))
  try {
    await nextMessage(producer, m => m.ready)
    const produced = nextMessage(producer, m => 'commits' in m)
    producer.send({ go: true })
    const { commits, startAt, endAt } = await produced
    await consumer.received(count, config.arrivalTimeout)
    const arrived = consumer.arrivals.slice()
    const last = Math.max(...arrived.map(([, at]) => at))
    const latencies = arrived.map(([tx, at]) => at - commits[tx])
    return {
      count,
      received: arrived.length,
      inStream: impl === 'plugin' ? await streamLength(redis, topic) : undefined,
      perSecond: arrived.length === count ? count / ((last - startAt) / 1000) : NaN,
      commitsPerSecond: count / ((endAt - startAt) / 1000),
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99)
    }
  } finally {
    await consumer.close()
    await stop(producer)
    await cleanup()
  }
}

/** The plugin's producer profiled over the measured window (`perTx` events per transaction): top frames by self CPU. */
async function profile(redis, kind, server, perTx) {
  const { analyse } = require('./profile')
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'event-queues-broker-profile-')), `producer-${kind}-${perTx}.cpuprofile`)
  const result = await measure({ kind, impl: 'plugin', perTx, rep: 'profile', server, redis, profileFile: file })
  return { kind, perTx, result, analysis: analyse(file), file }
}

const { fixed, rate, times } = require('./support/report')

function render({ results, startedAt, finishedAt, loadBefore, loadAfter, profiled, redisVersion }) {
  const { median } = require('./support/stats')
  const lines = [
    '# Relay to a broker: redis-streams (this plugin) vs CAP\'s queue with redis-messaging',
    '',
    `Measured by \`node bench/broker.js\` (part of \`npm run bench\`) on ${startedAt.toISOString()} – ${finishedAt.toISOString()}: ` +
      `${os.cpus().length} cores, load ${loadBefore.map(l => l.toFixed(1)).join(' ')} before, ${loadAfter.map(l => l.toFixed(1)).join(' ')} after; ` +
      `Node ${process.version}, @sap/cds ${require('@sap/cds/package.json').version}, redis-server ${redisVersion} on 127.0.0.1 (no persistence), ` +
      `${config.reps} repetition(s), contenders interleaved. Events: ${config.events[1]} at 1 per transaction, ${config.events[100]} at 100 per transaction.`,
    '',
    '- **plugin**: this plugin\'s queue relaying to `kind: \'redis-streams\'` (XADD; the entry stays in the stream until trimmed).',
    '- **CAP**: CAP\'s built-in queue (`persistent-queue`, legacyLocking false) relaying to CAP\'s `redis-messaging` (PUBLISH; the plugin not loaded). ' +
      '**CAP\'s figures do not include durability at the broker**: Redis pub/sub keeps nothing, a message published while no subscriber is connected is lost.',
    '- **events/s**: events ÷ (arrival of the last event at the bench\'s reader − start of the producer\'s first transaction); the producer commits its transactions one after the other as fast as it can, the relay runs in the same process meanwhile.',
    '- **commit → consumer**: an event\'s arrival at the bench\'s reader (XREAD BLOCK on the stream; a SUBSCRIBE connection for CAP, made before the producer started) − the commit time of its transaction, taken in the producer right after the commit. Both processes on one machine, one clock.',
    '- **commits/s**: the producer\'s own pace, events committed per second (first transaction\'s start to last commit). Where the relay is slower than the commits, a backlog builds up in the queue table and the commit → consumer figures are mostly time spent waiting in it.',
    '- Every figure is the median over the repetitions; ratios are plugin ÷ CAP per repetition, then the median.',
    '',
    '| database | events/tx | plugin events/s | CAP events/s | throughput plugin ÷ CAP | plugin p50 / p99 (ms) | CAP p50 / p99 (ms) | plugin p99 ÷ CAP p50 | commits/s plugin / CAP | received plugin / CAP (of) |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---|'
  ]
  const verdicts = []
  for (const kind of config.dbs) {
    for (const perTx of config.perTx) {
      const runs = results[kind][perTx]
      const pick = (impl, key) => median(runs[impl].map(r => r[key]))
      const throughput = median(runs.plugin.map((r, i) => r.perSecond / runs.cap[i].perSecond))
      const latency = median(runs.plugin.map((r, i) => r.p99 / runs.cap[i].p50))
      verdicts.push({ kind, perTx, met: throughput >= 5 && latency < 1, throughput, latency })
      const got = impl => runs[impl].map(r => r.received + (r.inStream !== undefined ? ` (XLEN ${r.inStream})` : '')).join(', ')
      lines.push(`| ${kind} | ${perTx} | ${rate(pick('plugin', 'perSecond'))} | ${rate(pick('cap', 'perSecond'))} | ${times(throughput)} | ` +
        `${fixed(pick('plugin', 'p50'), 1)} / ${fixed(pick('plugin', 'p99'), 1)} | ${fixed(pick('cap', 'p50'), 1)} / ${fixed(pick('cap', 'p99'), 1)} | ` +
        `${times(latency)} | ${rate(pick('plugin', 'commitsPerSecond'))} / ${rate(pick('cap', 'commitsPerSecond'))} | ${got('plugin')} / ${got('cap')} (${config.events[perTx]}) |`)
    }
  }
  lines.push('', 'Target (issue 24): ≥ 5× CAP\'s throughput and a p99 below CAP\'s p50.', '')
  for (const v of verdicts) lines.push(`- ${v.kind}, ${v.perTx} per transaction: ${v.met ? 'met' : '**not met**'} (throughput ${times(v.throughput)}, p99 ÷ CAP p50 ${times(v.latency)})`)
  for (const { kind, perTx, result, analysis, file } of profiled ?? []) {
    lines.push('', `## Where the plugin's producer spends its CPU: ${kind}, ${perTx} per transaction`, '',
      `V8's CPU profiler (as \`node --cpu-prof\`) over the measured window only (commits and relay until the queue table is empty; not the start), ` +
      `${result.count} events: ${rate(result.perSecond)} events/s in this run, ${rate(result.commitsPerSecond)} commits/s; ${analysis.busySamples} busy of ${analysis.samples} samples (the rest: the process idle, waiting for the database, Redis or the CPU); profile: \`${file}\` (Chrome DevTools).`, '',
      '| self CPU by package | share of busy samples |', '|---|---:|', ...analysis.byPackage.map(([k, v]) => `| ${k} | ${v} |`), '',
      '| inclusive: samples with this function on the stack | share |', '|---|---:|', ...analysis.inclusive.map(([k, v]) => `| ${k} | ${v} |`), '',
      '| top functions, self CPU | share |', '|---|---:|', ...analysis.functions.map(([k, v]) => `| ${k} | ${v} |`))
  }
  return { text: lines.join('\n') + '\n', verdicts }
}

async function parent() {
  const postgres = require('./support/postgres')
  const redisServer = require('../scripts/redis-server')
  const startedAt = new Date()
  const loadBefore = os.loadavg()
  const results = Object.fromEntries(config.dbs.map(kind => [kind, Object.fromEntries(config.perTx.map(n => [n, { plugin: [], cap: [] }]))]))
  let server
  let redis
  try {
    redis = await redisServer.startServer({ password: PASSWORD })
    if (config.dbs.includes('postgres')) server = await postgres.startServer()
    for (let rep = 1; rep <= config.reps; rep++) {
      for (const kind of config.dbs) {
        for (const perTx of config.perTx) {
          // who goes first alternates, so neither always runs on a machine the other just warmed or loaded
          for (const impl of rep % 2 ? IMPLS : [...IMPLS].reverse()) {
            const result = await measure({ kind, impl, perTx, rep, server, redis })
            log(`rep ${rep}, ${kind}, ${perTx}/tx, ${impl}: ${rate(result.perSecond)} events/s, p50 ${fixed(result.p50, 1)} ms, p99 ${fixed(result.p99, 1)} ms, received ${result.received}/${result.count}`)
            results[kind][perTx][impl].push(result)
          }
        }
      }
    }
    const { verdicts } = render({ results, startedAt, finishedAt: new Date(), loadBefore, loadAfter: os.loadavg() })
    const missed = verdicts.some(v => !v.met)
    let profiled
    if (config.profile === '1' || (config.profile !== '0' && missed)) {
      profiled = []
      for (const [kind, perTx] of PROFILED.filter(([kind]) => config.dbs.includes(kind))) {
        log(`profiling the plugin's producer (${kind}, ${perTx} per transaction)`)
        profiled.push(await profile(redis, kind, server, perTx))
      }
    }
    const redisVersion = require('child_process').execFileSync(process.env.REDIS_SERVER ?? '/usr/bin/redis-server', ['--version'], { encoding: 'utf8' }).match(/v=(\S+)/)?.[1]
    const { text } = render({ results, startedAt, finishedAt: new Date(), loadBefore, loadAfter: os.loadavg(), profiled, redisVersion })
    console.log(text)
    fs.writeFileSync(path.join(__dirname, 'BROKER.md'), text)
    log('written to bench/BROKER.md')
  } finally {
    if (redis) await redisServer.stopServer(redis)
    if (server) await postgres.stopServer(server)
  }
}

require('./support/processes').runScript('BENCH_BROKER_CHILD', child, parent)
