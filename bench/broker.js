/**
 * `node bench/broker.js` (part of `npm run bench`; `npm run build` first): the relay to a real broker, this plugin's
 * `kind: 'redis-streams'` beside CAP's built-in queue with CAP's `redis-messaging` (the plugin not loaded), in the same
 * run, interleaved, on durable databases (a SQLite file; a database of the embedded PostgreSQL server with its durable
 * defaults). A `redis-server` is started on 127.0.0.1 by this script (scripts/redis-server.js, no persistence: CAP's
 * pub/sub keeps nothing anyway) and stopped by its PID.
 *
 * Per database and contender, a producer process (the bench app, bench/app) with a messaging service `broker`, queued
 * by default, runs one of two scenarios (issue 32):
 * - burst: BENCH_BROKER_BURST events (5,000) emitted in one transaction, then one `cds.flush()`; events/s = events ÷
 *   (the last event's arrival at the bench's reader − the commit);
 * - paced: BENCH_BROKER_PACED transactions (1,000) of one event each, started at BENCH_BROKER_RATE per second (200);
 *   commit → arrival p50/p99 per event.
 * The commit time is taken right after the commit (a 'succeeded' listener registered before the transaction's first
 * emit, so it runs before the queue's own). The bench process itself is the consumer: it reads the plugin's stream
 * with XREAD BLOCK, or is subscribed to CAP's channel before the producer starts, and stamps each event's arrival.
 * The plugin's entries are also counted in the stream (XLEN) after each run. Before measuring, each producer relays a
 * warm-up on another topic and waits until its queue table is empty. It measures; it does not pass or fail.
 *
 * Contenders (BENCH_BROKER_IMPLS, default "plugin,cap"): plugin (redis-streams), cap (CAP's queue → redis-messaging),
 * portable (the plugin's portable store → redis-streams), plugin-redis-messaging (the plugin's queue → CAP's
 * redis-messaging), baseline (the plugin built at BENCH_BASELINE, another checkout, → redis-streams). Then the broker's own limit: `redis-benchmark` (Debian's redis-tools) XADD on the same server, one
 * connection unpipelined, one connection in pipelines of 50, and 50 connections in pipelines of 50.
 *
 * Sizes via environment: BENCH_BROKER_BURST, BENCH_BROKER_PACED, BENCH_BROKER_RATE, BENCH_REPS (3), BENCH_DBS
 * ("sqlite,postgres"), BENCH_BROKER_SCENARIOS ("burst,paced"), BENCH_BROKER_PROFILE ("0": no profile; "1": always; default: only when a target, ≥ 10× CAP's
 * burst throughput and a paced p99 below CAP's p50, is missed; then the plugin's producer runs once more per database
 * under V8's CPU profiler, over the measured window). Writes the tables to bench/BROKER.md.
 */
const fs = require('fs')
const os = require('os')
const path = require('path')
const { execFileSync } = require('child_process')

const config = {
  burst: Number(process.env.BENCH_BROKER_BURST ?? 5000),
  paced: Number(process.env.BENCH_BROKER_PACED ?? 1000),
  rate: Number(process.env.BENCH_BROKER_RATE ?? 200),
  reps: Number(process.env.BENCH_REPS ?? 3),
  dbs: (process.env.BENCH_DBS ?? 'sqlite,postgres').split(','),
  impls: (process.env.BENCH_BROKER_IMPLS ?? 'plugin,cap').split(','),
  scenarios: (process.env.BENCH_BROKER_SCENARIOS ?? 'burst,paced').split(','),
  /** How long the bench waits for the last event at its reader before it records what arrived. */
  arrivalTimeout: 180_000,
  profile: process.env.BENCH_BROKER_PROFILE
}
const SCENARIOS = ['burst', 'paced']
/** Issue 32's targets: burst throughput ≥ 10× CAP's, paced p99 below CAP's p50. */
const TARGET = 10
/** The runs profiled when a target is missed. */
const PROFILED = [['sqlite', 'burst'], ['postgres', 'burst'], ['sqlite', 'paced']]
const PASSWORD = 'bench' // CAP's adapter drops the host of a credentials.uri without user and password (see README)
const log = (...args) => console.error('[bench:broker]', ...args)
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

/** What a contender runs: the queue (bench/support/app.js `environment`) and the kind of the broker service. */
const CONTENDERS = {
  plugin: { queue: 'plugin', kind: 'redis-streams' },
  cap: { queue: 'cap', kind: 'redis-messaging' },
  portable: { queue: 'portable', kind: 'redis-streams' },
  'plugin-redis-messaging': { queue: 'plugin', kind: 'redis-messaging' },
  baseline: { queue: 'baseline', kind: 'redis-streams' }
}
const readsStream = impl => CONTENDERS[impl].kind === 'redis-streams'

/** The broker service of a contender: the plugin's redis-streams, or CAP's redis-messaging (pub/sub). */
const brokerService = (impl, redis) => ({ kind: CONTENDERS[impl].kind, credentials: { uri: redis.url } })

/** Child: the producer. Relays a warm-up, then on 'go' runs its scenario and sends the commit times. */
async function child() {
  setInterval(() => {}, 60_000) // keep alive until the figures are sent
  const { boot, serve } = require('./support/app')
  const { wallClock, pending } = require('./support/messages')
  const { cds } = await boot()
  const broker = await cds.connect.to('broker')
  await serve(cds)
  const topic = process.env.BENCH_TOPIC
  const count = Number(process.env.BENCH_COUNT)
  const emptied = async within => {
    const end = Date.now() + within
    while ((await pending(cds)) > 0) {
      if (Date.now() > end) throw new Error(`the queue table was not empty within ${within} ms`)
      await sleep(10)
    }
  }
  /** One transaction emitting `events` events of `tx` on `event`; its commit time in `commits[tx]`, the CPU used so far in `cpu`. */
  let cpu
  const transaction = (event, tx, events, commits) => cds.tx(async () => {
    cds.context.on('succeeded', () => ((commits[tx] = wallClock()), (cpu ??= process.cpuUsage())))
    for (let n = 0; n < events; n++) await broker.emit(event, { tx, n })
  })
  const scenarios = {
    async burst(event, commits) {
      await transaction(event, 0, count, commits)
      await Promise.race([cds.flush(), sleep(1000)])
    },
    async paced(event, commits, total = count) {
      const start = wallClock()
      for (let tx = 0; tx < total; tx++) {
        const wait = start + (tx * 1000) / config.rate - wallClock()
        if (wait > 0) await sleep(wait)
        await transaction(event, tx, 1, commits)
      }
    }
  }
  // the warm-up compiles both paths: a burst, then single transactions
  await transaction(`${topic}/warm-up`, 0, 1000, [])
  await Promise.race([cds.flush(), sleep(1000)])
  await emptied(60_000)
  await scenarios.paced(`${topic}/warm-up`, [], 100)
  await emptied(60_000)
  const go = new Promise(resolve => process.once('message', resolve))
  process.send({ ready: true })
  await go
  const commits = []
  cpu = undefined
  let profiler
  if (process.env.BENCH_PROFILE_FILE && process.env.BENCH_SCENARIO === 'burst') {
    // the relay alone: the plugin's runner is held while the transaction emits, and released once the profiler runs
    const release = require('../lib/plugin').eventQueues().runner.hold()
    await transaction(topic, 0, count, commits)
    profiler = await profiling()
    release()
    await Promise.race([cds.flush(), sleep(1000)])
  } else {
    profiler = process.env.BENCH_PROFILE_FILE && (await profiling())
    await scenarios[process.env.BENCH_SCENARIO](topic, commits)
  }
  // this process exits once it sent its figures: it stays until its relay is done (the profile covers exactly that)
  await emptied(config.arrivalTimeout)
  // from the first commit until the table is empty: the relay, and in the paced runs the later transactions too
  const used = process.cpuUsage(cpu)
  if (profiler) fs.writeFileSync(process.env.BENCH_PROFILE_FILE, JSON.stringify(await profiler.stop()))
  await new Promise(resolve => process.send({ commits, cpuMicros: (used.user + used.system) / count }, resolve))
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
  if (!readsStream(impl)) {
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
      while (arrivals.length < count && Date.now() < end) await sleep(20)
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
async function measure({ kind, impl, scenario, rep, server, redis, profileFile }) {
  const { newDatabase } = require('./support/databases')
  const { environment } = require('./support/app')
  const { start, nextMessage, stop } = require('./support/processes')
  const { percentile } = require('./support/stats')
  const count = config[scenario]
  const topic = `bench/${kind}/${impl}/${scenario}/${rep}`
  const { db, cleanup } = await newDatabase(kind, server)
  const consumer = await reader(redis, impl, topic)
  const extra = { BENCH_BROKER_CHILD: 'yes', BENCH_TOPIC: topic, BENCH_SCENARIO: scenario, BENCH_COUNT: String(count), BENCH_PROFILE_FILE: profileFile ?? '' }
  const producer = start('broker.js', environment(CONTENDERS[impl].queue, db, extra, { requires: { broker: brokerService(impl, redis) } }))
  try {
    await nextMessage(producer, m => m.ready)
    const load = os.loadavg()[0]
    const produced = nextMessage(producer, m => 'commits' in m)
    producer.send({ go: true })
    const { commits, cpuMicros } = await produced
    await consumer.received(count, config.arrivalTimeout)
    const arrived = consumer.arrivals.slice()
    const last = Math.max(...arrived.map(([, at]) => at))
    const latencies = arrived.map(([tx, at]) => at - commits[tx])
    return {
      count,
      load,
      received: arrived.length,
      inStream: readsStream(impl) ? await streamLength(redis, topic) : undefined,
      perSecond: arrived.length === count ? count / ((last - commits[0]) / 1000) : NaN,
      cpuMicros,
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99)
    }
  } finally {
    await consumer.close()
    await stop(producer)
    await cleanup()
  }
}

/** The plugin's producer profiled over the measured window of `scenario`: top frames by self CPU. */
async function profile(redis, kind, server, scenario) {
  const { analyse } = require('./profile')
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'event-queues-broker-profile-')), `producer-${kind}-${scenario}.cpuprofile`)
  const result = await measure({ kind, impl: 'plugin', scenario, rep: 'profile', server, redis, profileFile: file })
  return { kind, scenario, result, analysis: analyse(file), file }
}

/**
 * The broker's own limit for XADD on this server and machine (`redis-benchmark`, Debian's redis-tools): entries of
 * the size the plugin's are, one connection one command at a time, one connection in pipelines of 50 (the relay's
 * batches), and 50 connections in pipelines of 50. Requests/s per variant; undefined where redis-benchmark is missing.
 */
function brokerLimit(redis) {
  const binary = process.env.REDIS_BENCHMARK ?? '/usr/bin/redis-benchmark'
  if (!fs.existsSync(binary)) return undefined
  // as long as the plugin's entries here, without the commas and quotes of JSON, which redis-benchmark's CSV would not quote
  const entry = 'x'.repeat(JSON.stringify({ data: { tx: 0, n: 0 }, 'x-message-id': '00000000-0000-4000-8000-000000000000' }).length)
  const variants = [['1 connection, 1 command per round trip', 1, 1, 20_000], ['1 connection, pipelines of 50', 1, 50, 200_000], ['50 connections, pipelines of 50', 50, 50, 500_000]]
  return variants.map(([what, clients, pipeline, requests]) => {
    const args = ['-h', redis.host, '-p', String(redis.port), '-a', PASSWORD, '-c', String(clients), '-P', String(pipeline), '-n', String(requests), '--csv',
      'XADD', 'bench/limit', 'MAXLEN', '~', '100000', '*', 'message', entry]
    const out = execFileSync(binary, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] })
    const [, rps] = out.trim().split('\n').pop().split(',').map(v => v.replace(/"/g, ''))
    return { what, perSecond: Number(rps), load: os.loadavg()[0] }
  })
}

const { fixed, rate, times } = require('./support/report')

function render({ results, startedAt, finishedAt, loads, profiled, redisVersion, limit }) {
  const { median } = require('./support/stats')
  const others = config.impls.filter(impl => impl !== 'plugin' && impl !== 'cap')
  const range = values => `${Math.min(...values).toFixed(1)}–${Math.max(...values).toFixed(1)}`
  const lines = [
    '# Relay to a broker: redis-streams (this plugin) vs CAP\'s queue with redis-messaging',
    '',
    `Measured by \`node bench/broker.js\` (part of \`npm run bench\`) on ${startedAt.toISOString()} – ${finishedAt.toISOString()}: ` +
      `${os.cpus().length} cores, 1-minute load average ${range(loads)} at the runs' starts; ` +
      `Node ${process.version}, @sap/cds ${require('@sap/cds/package.json').version}, redis-server ${redisVersion} on 127.0.0.1 (no persistence), ` +
      `${config.reps} repetition(s), contenders interleaved. Burst: ${config.burst.toLocaleString('en-US')} events emitted in one transaction; ` +
      `paced: ${config.paced.toLocaleString('en-US')} transactions of one event at ${config.rate} per second.`,
    '',
    '- **plugin**: this plugin\'s queue relaying to `kind: \'redis-streams\'` (XADD; the entry stays in the stream until trimmed).',
    '- **CAP**: CAP\'s built-in queue (`persistent-queue`, legacyLocking false) relaying to CAP\'s `redis-messaging` (PUBLISH; the plugin not loaded). ' +
      '**CAP\'s figures do not include durability at the broker**: Redis pub/sub keeps nothing, a message published while no subscriber is connected is lost.',
    ...(others.includes('portable') ? ['- **portable**: the plugin with `store: \'portable\'` (CQL only) relaying to `redis-streams`.'] : []),
    ...(others.includes('plugin-redis-messaging') ? ['- **plugin-redis-messaging**: the plugin\'s queue relaying to CAP\'s `redis-messaging`.'] : []),
    ...(others.includes('baseline') ? [`- **baseline**: the plugin built at \`${process.env.BENCH_BASELINE}\` relaying to \`redis-streams\`.`] : []),
    '- **events/s** (burst): events ÷ (arrival of the last event at the bench\'s reader − the commit of the transaction that emitted them all).',
    '- **CPU µs/event** (burst): the producer process\'s CPU (`process.cpuUsage()`, all its threads) from the commit until its queue table is empty, ÷ events: what the relay costs, less sensitive to other load on the machine than events/s.',
    '- **commit → consumer** (paced): an event\'s arrival at the bench\'s reader (XREAD BLOCK on the stream; a SUBSCRIBE connection for CAP, made before the producer started) − the commit time of its transaction, taken in the producer right after the commit. Both processes on one machine, one clock.',
    '- Every figure is the median over the repetitions; ratios are plugin ÷ CAP per repetition, then the median.',
    '',
    `| database | plugin events/s | CAP events/s | plugin ÷ CAP | CPU µs/event plugin / CAP | plugin p50 / p99 (ms) | CAP p50 / p99 (ms) | plugin p99 ÷ CAP p50 |${others.map(o => ` ${o}: events/s, CPU µs/event, p50 / p99 (ms) |`).join('')} received (burst; paced) |`,
    `|---|---:|---:|---:|---:|---:|---:|---:|${others.map(() => '---:|').join('')}---|`
  ]
  const verdicts = []
  for (const kind of config.dbs) {
    const runs = results[kind]
    const pick = (scenario, impl, key) => median((runs[scenario][impl] ?? []).map(r => r[key]))
    const ratio = (scenario, of) => median((runs[scenario].plugin ?? []).map((r, i) => of(r, runs[scenario].cap?.[i] ?? {})))
    const throughput = ratio('burst', (plugin, cap) => plugin.perSecond / cap.perSecond)
    const latency = ratio('paced', (plugin, cap) => plugin.p99 / cap.p50)
    verdicts.push({ kind, throughput, latency })
    const got = scenario => config.impls.map(impl => `${impl} ${runs[scenario][impl].map(r => r.received + (r.inStream !== undefined ? ` (XLEN ${r.inStream})` : '')).join(', ')}`).join('; ')
    const other = impl => ` ${rate(pick('burst', impl, 'perSecond'))}, ${fixed(pick('burst', impl, 'cpuMicros'), 0)}, ${fixed(pick('paced', impl, 'p50'), 2)} / ${fixed(pick('paced', impl, 'p99'), 2)} |`
    lines.push(`| ${kind} | ${rate(pick('burst', 'plugin', 'perSecond'))} | ${rate(pick('burst', 'cap', 'perSecond'))} | ${times(throughput)} | ` +
      `${fixed(pick('burst', 'plugin', 'cpuMicros'), 0)} / ${fixed(pick('burst', 'cap', 'cpuMicros'), 0)} | ` +
      `${fixed(pick('paced', 'plugin', 'p50'), 2)} / ${fixed(pick('paced', 'plugin', 'p99'), 2)} | ${fixed(pick('paced', 'cap', 'p50'), 2)} / ${fixed(pick('paced', 'cap', 'p99'), 2)} | ` +
      `${times(latency)} |${others.map(other).join('')} ${got('burst')} (of ${config.burst}); ${got('paced')} (of ${config.paced}) |`)
  }
  lines.push('', `Targets (issue 32): burst throughput ≥ ${TARGET}× CAP's, paced p99 below CAP's p50.`, '')
  for (const v of verdicts) {
    lines.push(`- ${v.kind}: throughput ${v.throughput >= TARGET ? 'met' : '**not met**'} (${times(v.throughput)}), latency ${v.latency < 1 ? 'met' : '**not met**'} (p99 ÷ CAP p50 ${times(v.latency)})`)
  }
  if (limit) {
    const plugin = Math.max(...config.dbs.map(kind => median(results[kind].burst.plugin.map(r => r.perSecond))))
    lines.push('', '## The broker\'s own limit', '',
      `\`redis-benchmark\` XADD on the same redis-server (entries of the size the plugin's are, approximate trimming to 100,000), after the runs; the plugin's best burst median (${rate(plugin)} events/s) beside it.`, '',
      '| redis-benchmark | XADD/s | plugin\'s burst ÷ it | load |', '|---|---:|---:|---:|',
      ...limit.map(l => `| ${l.what} | ${rate(l.perSecond)} | ${times(plugin / l.perSecond)} | ${l.load.toFixed(1)} |`))
  }
  for (const { kind, scenario, result, analysis, file } of profiled ?? []) {
    lines.push('', `## Where the plugin's producer spends its CPU: ${kind}, ${scenario}`, '',
      `V8's CPU profiler (as \`node --cpu-prof\`) over the measured window only (${scenario === 'burst' ? 'the relay alone: the runner held while the transaction emitted, released once the profiler ran, until the queue table is empty' : 'the transactions and the relay until the queue table is empty'}; not the start), ` +
      `${result.count} events: ${rate(result.perSecond)} events/s, p50 ${fixed(result.p50, 2)} ms, p99 ${fixed(result.p99, 2)} ms in this run; ${analysis.busySamples} busy of ${analysis.samples} samples (the rest: the process idle, waiting for the database, Redis or the CPU); profile: \`${file}\` (Chrome DevTools).`, '',
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
  const results = Object.fromEntries(config.dbs.map(kind => [kind, Object.fromEntries(SCENARIOS.map(s => [s, Object.fromEntries(config.impls.map(i => [i, []]))]))]))
  const loads = []
  let server
  let redis
  try {
    redis = await redisServer.startServer({ password: PASSWORD })
    if (config.dbs.includes('postgres')) server = await postgres.startServer()
    for (let rep = 1; rep <= config.reps; rep++) {
      for (const kind of config.dbs) {
        for (const scenario of config.scenarios) {
          // who goes first alternates, so neither always runs on a machine the other just warmed or loaded
          for (const impl of rep % 2 ? config.impls : [...config.impls].reverse()) {
            const result = await measure({ kind, impl, scenario, rep, server, redis })
            loads.push(result.load)
            log(`rep ${rep}, ${kind}, ${scenario}, ${impl}: ${rate(result.perSecond)} events/s, ${fixed(result.cpuMicros, 0)} µs CPU/event, p50 ${fixed(result.p50, 2)} ms, p99 ${fixed(result.p99, 2)} ms, received ${result.received}/${result.count}, load ${result.load.toFixed(1)}`)
            results[kind][scenario][impl].push(result)
          }
        }
      }
    }
    const limit = brokerLimit(redis)
    const { verdicts } = render({ results, startedAt, finishedAt: new Date(), loads, limit })
    const missed = verdicts.some(v => v.throughput < TARGET || !(v.latency < 1))
    let profiled
    if (config.profile === '1' || (config.profile !== '0' && missed)) {
      profiled = []
      for (const [kind, scenario] of PROFILED.filter(([kind, scenario]) => config.dbs.includes(kind) && config.scenarios.includes(scenario))) {
        log(`profiling the plugin's producer (${kind}, ${scenario})`)
        profiled.push(await profile(redis, kind, server, scenario))
      }
    }
    const redisVersion = execFileSync(process.env.REDIS_SERVER ?? '/usr/bin/redis-server', ['--version'], { encoding: 'utf8' }).match(/v=(\S+)/)?.[1]
    const { text } = render({ results, startedAt, finishedAt: new Date(), loads, profiled, redisVersion, limit })
    console.log(text)
    fs.writeFileSync(path.join(__dirname, 'BROKER.md'), text)
    log('written to bench/BROKER.md')
  } finally {
    if (redis) await redisServer.stopServer(redis)
    if (server) await postgres.stopServer(server)
  }
}

require('./support/processes').runScript('BENCH_BROKER_CHILD', child, parent)
