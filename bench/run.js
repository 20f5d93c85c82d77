/**
 * `npm run bench`: this plugin against CAP's built-in queue, same app, same machine, same databases (a SQLite file and
 * an embedded PostgreSQL server with its durable defaults), interleaved per repetition, beside the database's floor
 * for the same work. Prints one table of medians (with the spread over repetitions) and ratios against baselines
 * measured in the same run, and writes it to bench/RESULTS.md. It measures; it does not pass or fail.
 *
 * About 15 minutes on 2 cores with the defaults (2 repetitions; 14.4 min measured); BENCH_QUICK=1 about 4 (one repetition, smaller
 * backlogs); BENCH_REPS=3 BENCH_MESSAGES=10000 BENCH_SCALE_REPS=3 for tighter figures. Sizes via environment:
 * BENCH_REPS, BENCH_MESSAGES, BENCH_SMALL, BENCH_REMOTE_MESSAGES, BENCH_CONCURRENCY ("10,50,200"), BENCH_REMOTE_DELAY
 * (ms, 20), BENCH_LATENCY_SAMPLES, BENCH_PAIRS_1, BENCH_PAIRS_100, BENCH_SCALE (process counts, e.g. "1,2,4"),
 * BENCH_SCALE_REPS, BENCH_DBS ("sqlite,postgres"), BENCH_FSYNC_OFF ("0": no fsync=off column), BENCH_PG_SETTINGS
 * (JSON server parameters of the main PostgreSQL server), BENCH_QUEUE (JSON options merged into the plugin's
 * cds.requires.queue, e.g. {"batchSize":50}), BENCH_BASELINE (another version of the plugin, measured in process
 * beside this one in the same repetitions: a folder inside this repository, e.g. .stacks/baseline, with that
 * version's built cds-plugin.js, package.json, lib/, srv/ and db/, so it loads the same @sap/cds as the bench app).
 * The portable store (`store: 'portable'`, CQL only: what SAP HANA runs) is measured beside the native one.
 */
const fs = require('fs')
const os = require('os')
const path = require('path')
const { startServer, stopServer, withClient, FSYNC_OFF } = require('./support/postgres')
const { newDatabase } = require('./support/databases')
const { environment } = require('./support/app')
const { start, nextMessage, runOnce, stop } = require('./support/processes')
const { percentile } = require('./support/stats')
const { wallClock } = require('./support/messages')
const { startRemote, remoteService } = require('./support/remote')
const { claimPlan } = require('./support/claim-plan')
const { waitSampler } = require('./support/waits')
const { dispatchCost } = require('./dispatch-cost')
const report = require('./support/report')

const quick = process.env.BENCH_QUICK === '1'
const numbers = (value, fallback) => (value ?? fallback).split(',').map(Number)
const size = (name, full, small) => Number(process.env[name] ?? (quick ? small : full))
const config = {
  quick,
  reps: size('BENCH_REPS', 2, 1),
  messages: size('BENCH_MESSAGES', 3000, 1000),
  /** Backlog of the slower or secondary measurements: writing handler, mixed queues, CAP left to itself, floors. */
  smallBacklog: size('BENCH_SMALL', 1000, 500),
  remoteMessages: size('BENCH_REMOTE_MESSAGES', 1000, 500),
  concurrency: numbers(process.env.BENCH_CONCURRENCY, '10,50,200'),
  remoteDelay: size('BENCH_REMOTE_DELAY', 20, 20),
  latencySamples: size('BENCH_LATENCY_SAMPLES', 100, 30),
  pairs1: size('BENCH_PAIRS_1', 20, 10),
  pairs100: size('BENCH_PAIRS_100', 5, 3),
  scale: numbers(process.env.BENCH_SCALE, '1,2,4'),
  scaleReps: size('BENCH_SCALE_REPS', 1, 1),
  dbs: (process.env.BENCH_DBS ?? 'sqlite,postgres').split(','),
  fsyncOff: process.env.BENCH_FSYNC_OFF !== '0',
  /** The plugin's default, used by the floors' per-batch figures. */
  batchSize: 50,
  drainTimeout: 180_000,
  pollEvery: 10
}
const IMPLS = ['plugin', 'portable', ...(process.env.BENCH_BASELINE ? ['baseline'] : []), 'cap', 'floor']
const log = (...args) => console.error('[bench]', ...args)


/** One process of `inprocess.js` on a fresh database: BENCH_PART `part`, `options` for environment(). */
async function inProcess(kind, impl, server, part, extra = {}, options = {}) {
  const { db, cleanup } = await newDatabase(kind, server)
  try {
    return await runOnce('inprocess.js', environment(impl, db, { BENCH_CONFIG: JSON.stringify(config), BENCH_PART: part, ...extra }, options))
  } finally {
    await cleanup()
  }
}

/**
 * The remote-call drain at `concurrency`: the plugin with that `concurrency`, CAP with that `chunkSize` (CAP runs a
 * chunk's messages in parallel, the next chunk after the last one ended), the floor with that many workers.
 */
async function remoteDrain(kind, impl, server, remote, concurrency) {
  remote.inFlight.max = 0
  const queue = impl === 'cap' ? { chunkSize: concurrency } : impl === 'floor' ? {} : { concurrency }
  const extra = { BENCH_CONCURRENCY: String(concurrency), BENCH_REMOTE_URL: remote.url }
  try {
    const result = await inProcess(kind, impl, server, 'remote', extra, { queue, requires: { Remote: remoteService(remote.url) } })
    return { ...result, maxInFlight: remote.inFlight.max }
  } catch (e) {
    // A contender that cannot run at this concurrency (CAP's runner holds a pool connection per running message) is
    // a result, not the end of the run: the report names what stopped it.
    const lines = String(e.message).split('\n')
    const cause = lines.filter(l => /^\w*Error\b/.test(l.trim())).at(-1)?.trim() ?? lines[0]
    const counted = lines.filter(l => l.includes('ResourceRequest timed out')).length
    log(`${impl} on ${kind} at concurrency ${concurrency} failed: ${cause}`)
    return { crashed: cause, poolTimeouts: counted, maxInFlight: remote.inFlight.max }
  }
}

/** Commit in one process, handler start in another (the plugin's NOTIFY wake-up), one message at a time. */
async function crossProcessLatency(server) {
  const { db, cleanup } = await newDatabase('postgres', server)
  const children = []
  try {
    await runOnce('instance.js', environment('plugin', db, { BENCH_ROLE: 'fill', BENCH_COUNT: '0' }))
    const dispatcher = start('instance.js', environment('plugin', db, { BENCH_ROLE: 'dispatch' }))
    const enqueuer = start('instance.js', environment('plugin', db, { BENCH_ROLE: 'enqueue' }))
    children.push(dispatcher, enqueuer)
    await Promise.all(children.map(c => nextMessage(c, m => m.ready)))
    dispatcher.send({ go: true })
    await new Promise(resolve => setTimeout(resolve, 500)) // the runner's LISTEN connection is up
    const values = []
    for (let n = 0; n < config.latencySamples; n++) {
      const pinged = nextMessage(dispatcher, m => m.pinged === n)
      const committed = nextMessage(enqueuer, m => m.committed === n)
      enqueuer.send({ ping: n })
      const [c, p] = await Promise.all([committed, pinged])
      values.push(p.at - c.at)
    }
    return { p50: percentile(values, 50), p99: percentile(values, 99), samples: values.length }
  } finally {
    await Promise.all(children.map(c => stop(c)))
    await cleanup()
  }
}

/**
 * Drain throughput of `count` processes sharing one PostgreSQL database, timed from 'go' until the table is empty,
 * with what the database's backends waited for meanwhile and, for the plugin, each process's claims.
 */
async function scaleOut(server, impl, count) {
  const { db, database, cleanup } = await newDatabase('postgres', server)
  const children = []
  try {
    await runOnce('instance.js', environment(impl, db, { BENCH_ROLE: 'fill', BENCH_COUNT: String(config.messages) }))
    for (let i = 0; i < count; i++) children.push(start('instance.js', environment(impl, db, { BENCH_ROLE: 'dispatch' })))
    await Promise.all(children.map(c => nextMessage(c, m => m.ready)))
    const result = await withClient(async client => {
      const waits = waitSampler(client, database)
      const startAt = wallClock()
      for (const child of children) child.send({ go: true })
      let left
      do {
        await new Promise(resolve => setTimeout(resolve, config.pollEvery))
        await waits.sample()
        left = Number((await client.query('SELECT count(*) AS n FROM cds_outbox_Messages')).rows[0].n)
      } while (left > 0 && wallClock() - startAt < config.drainTimeout)
      const seconds = (wallClock() - startAt) / 1000
      return { perSecond: left === 0 ? config.messages / seconds : NaN, seconds, left, waits: waits.counts }
    }, database, server)
    const reports = await Promise.all(children.map(c => {
      const reported = nextMessage(c, m => 'report' in m)
      c.send({ report: true })
      return reported.then(m => m.report)
    }))
    return { ...result, claims: reports.filter(Boolean) }
  } finally {
    await Promise.all(children.map(c => stop(c)))
    await cleanup()
  }
}

/** EXPLAIN ANALYZE of the claim on a backlog of `config.messages` due messages. */
async function planOfClaim(server) {
  const { db, database, cleanup } = await newDatabase('postgres', server)
  try {
    await runOnce('instance.js', environment('plugin', db, { BENCH_ROLE: 'fill', BENCH_COUNT: String(config.messages) }))
    return await withClient(client => claimPlan(client, 500), database, server)
  } finally {
    await cleanup()
  }
}

const push = (object, keys, value) => {
  let at = object
  for (const key of keys.slice(0, -1)) at = at[key] ??= {}
  ;(at[keys.at(-1)] ??= []).push(value)
}

async function repetition(rep, servers, remote, results) {
  const tag = `repetition ${rep}/${config.reps}`
  for (const kind of config.dbs) {
    const server = servers.durable
    for (const impl of IMPLS) {
      log(`${tag}: ${impl} on ${kind}`)
      push(results.inProcess, [kind, impl], await inProcess(kind, impl, server, 'core'))
    }
    for (const concurrency of config.concurrency) {
      for (const impl of IMPLS) {
        log(`${tag}: ${impl} on ${kind}, remote calls at concurrency ${concurrency}`)
        push(results.remote, [kind, concurrency, impl], await remoteDrain(kind, impl, server, remote, concurrency))
      }
    }
  }
  if (servers.fsyncOff) {
    for (const impl of IMPLS) {
      log(`${tag}: ${impl} on postgres with fsync=off (drains)`)
      push(results.inProcess, ['postgres-fsync-off', impl], await inProcess('postgres', impl, servers.fsyncOff, 'drains'))
    }
  }
  if (!servers.durable) return
  log(`${tag}: commit-to-handler across processes (plugin, PostgreSQL)`)
  results.crossProcess.push(await crossProcessLatency(servers.durable))
  if (rep > config.scaleReps) return
  for (const count of config.scale) {
    for (const impl of ['plugin', 'portable', 'cap']) {
      log(`${tag}: scale-out, ${impl} with ${count} process(es)`)
      push(results.scale, [impl, count], await scaleOut(servers.durable, impl, count))
    }
  }
}

async function main() {
  const startedAt = new Date()
  const loadBefore = os.loadavg()
  const results = { inProcess: {}, remote: {}, crossProcess: [], scale: {} }
  const onPostgres = config.dbs.includes('postgres')
  const servers = {}
  const remote = await startRemote(config.remoteDelay)
  try {
    if (onPostgres) servers.durable = await startServer()
    if (onPostgres && config.fsyncOff) servers.fsyncOff = await startServer(FSYNC_OFF)
    for (let rep = 1; rep <= config.reps; rep++) await repetition(rep, servers, remote, results)
    if (servers.durable) results.claimPlan = await planOfClaim(servers.durable)
    log('what CAP\'s dispatch of one message costs, step by step (bench/dispatch-cost.js)')
    results.dispatchCost = await dispatchCost()
    const serverVersion = servers.durable && (await withClient(c => c.query('SHOW server_version'), 'postgres', servers.durable)).rows[0].server_version
    const text = report.render({ config, results, startedAt, finishedAt: new Date(), loadBefore, loadAfter: os.loadavg(), serverVersion, baseline: process.env.BENCH_BASELINE })
    console.log(text)
    const file = path.join(__dirname, 'RESULTS.md')
    fs.writeFileSync(file, text + report.keptFindings(fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : ''))
    fs.writeFileSync(path.join(os.tmpdir(), 'event-queues-bench-results.json'), JSON.stringify({ config, results }, null, 1))
    log('written to bench/RESULTS.md (raw figures: $TMPDIR/event-queues-bench-results.json)')
  } finally {
    await remote.stop()
    for (const server of Object.values(servers)) await stopServer(server)
  }
}

main().catch(e => {
  console.error(e)
  process.exitCode = 1
})
