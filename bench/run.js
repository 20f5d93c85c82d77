/**
 * `npm run bench`: this plugin against CAP's built-in queue, same app, same machine, same databases (a SQLite file and
 * an embedded PostgreSQL server), interleaved per repetition. Prints one table of medians with ratios against
 * baselines measured in the same run and writes it to bench/RESULTS.md. It measures; it does not pass or fail.
 * The portable store (`store: 'portable'`, CQL only: what SAP HANA runs) is measured beside the native one.
 * Sizes via environment: BENCH_REPS, BENCH_MESSAGES, BENCH_SMALL, BENCH_LATENCY_SAMPLES, BENCH_PAIRS_1,
 * BENCH_PAIRS_100, BENCH_SCALE (process counts, e.g. "1,2,4"), BENCH_SCALE_REPS, BENCH_DBS ("sqlite,postgres"), BENCH_QUEUE
 * (JSON options merged into the plugin's cds.requires.queue, e.g. {"batchSize":50}), BENCH_BASELINE (another version
 * of the plugin, measured in process beside this one in the same repetitions: a folder inside this repository, e.g.
 * .stacks/baseline, with that version's built cds-plugin.js, package.json, lib/, srv/ and db/, so it loads the same
 * @sap/cds as the bench app).
 */
const fs = require('fs')
const os = require('os')
const path = require('path')
const { startServer, stopServer, createDatabase, dbConfig, newDatabaseName, withClient } = require('./support/postgres')
const { environment } = require('./support/app')
const { start, nextMessage, runOnce, stop } = require('./support/processes')
const { percentile } = require('./support/stats')
const { wallClock } = require('./support/messages')
const report = require('./support/report')

const numbers = (value, fallback) => (value ?? fallback).split(',').map(Number)
const config = {
  reps: Number(process.env.BENCH_REPS ?? 3),
  messages: Number(process.env.BENCH_MESSAGES ?? 10000),
  /** Backlog of the slower or secondary measurements: writing handler, CAP left to itself, enqueue while draining, floor. */
  smallBacklog: Number(process.env.BENCH_SMALL ?? 2000),
  latencySamples: Number(process.env.BENCH_LATENCY_SAMPLES ?? 200),
  pairs1: Number(process.env.BENCH_PAIRS_1 ?? 40),
  pairs100: Number(process.env.BENCH_PAIRS_100 ?? 8),
  scale: numbers(process.env.BENCH_SCALE, '1,2,4'),
  scaleReps: Number(process.env.BENCH_SCALE_REPS ?? 3),
  dbs: (process.env.BENCH_DBS ?? 'sqlite,postgres').split(','),
  drainTimeout: 120_000,
  pollEvery: 10
}
const IMPLS = ['plugin', 'portable', ...(process.env.BENCH_BASELINE ? ['baseline'] : []), 'cap', 'floor']
const log = (...args) => console.error('[bench]', ...args)

function sqliteDb() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'event-queues-bench-'))
  return { db: { kind: 'sqlite', credentials: { url: path.join(dir, 'bench.sqlite') } }, cleanup: () => fs.rmSync(dir, { recursive: true, force: true }) }
}

async function postgresDb(server) {
  const database = newDatabaseName()
  await createDatabase(database, server)
  const cleanup = () => withClient(c => c.query(`DROP DATABASE ${c.escapeIdentifier(database)} WITH (FORCE)`), 'postgres', server)
  return { db: dbConfig(database, server), database, cleanup }
}

const newDatabase = (kind, server) => (kind === 'sqlite' ? sqliteDb() : postgresDb(server))

async function inProcess(kind, impl, server) {
  const { db, cleanup } = await newDatabase(kind, server)
  try {
    return await runOnce('inprocess.js', environment(impl, db, { BENCH_CONFIG: JSON.stringify(config) }))
  } finally {
    await cleanup()
  }
}

/** Commit in one process, handler start in another (the plugin's NOTIFY wake-up), one message at a time. */
async function crossProcessLatency(server) {
  const { db, cleanup } = await postgresDb(server)
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

/** Drain throughput of `count` processes sharing one PostgreSQL database, timed from 'go' until the table is empty. */
async function scaleOut(server, impl, count) {
  const { db, database, cleanup } = await postgresDb(server)
  const children = []
  try {
    await runOnce('instance.js', environment(impl, db, { BENCH_ROLE: 'fill', BENCH_COUNT: String(config.messages) }))
    for (let i = 0; i < count; i++) children.push(start('instance.js', environment(impl, db, { BENCH_ROLE: 'dispatch' })))
    await Promise.all(children.map(c => nextMessage(c, m => m.ready)))
    return await withClient(async client => {
      const startAt = wallClock()
      for (const child of children) child.send({ go: true })
      let left
      do {
        await new Promise(resolve => setTimeout(resolve, config.pollEvery))
        left = Number((await client.query('SELECT count(*) AS n FROM cds_outbox_Messages')).rows[0].n)
      } while (left > 0 && wallClock() - startAt < config.drainTimeout)
      const seconds = (wallClock() - startAt) / 1000
      return { perSecond: left === 0 ? config.messages / seconds : NaN, left }
    }, database, server)
  } finally {
    await Promise.all(children.map(c => stop(c)))
    await cleanup()
  }
}

async function main() {
  const startedAt = new Date()
  const loadBefore = os.loadavg()
  const results = { inProcess: {}, crossProcess: [], scale: {} }
  const server = config.dbs.includes('postgres') ? await startServer() : undefined
  try {
    for (let rep = 1; rep <= config.reps; rep++) {
      for (const kind of config.dbs) {
        for (const impl of IMPLS) {
          log(`repetition ${rep}/${config.reps}: ${impl} on ${kind}`)
          ;((results.inProcess[kind] ??= {})[impl] ??= []).push(await inProcess(kind, impl, server))
        }
      }
      if (!server) continue
      log(`repetition ${rep}/${config.reps}: commit-to-handler across processes (plugin, PostgreSQL)`)
      results.crossProcess.push(await crossProcessLatency(server))
      if (rep > config.scaleReps) continue
      for (const count of config.scale) {
        for (const impl of ['plugin', 'portable', 'cap']) {
          log(`repetition ${rep}/${config.reps}: scale-out, ${impl} with ${count} process(es)`)
          ;((results.scale[impl] ??= {})[count] ??= []).push(await scaleOut(server, impl, count))
        }
      }
    }
    const serverVersion = server && (await withClient(c => c.query('SHOW server_version'), 'postgres', server)).rows[0].server_version
    const text = report.render({ config, results, startedAt, finishedAt: new Date(), loadBefore, loadAfter: os.loadavg(), serverVersion, baseline: process.env.BENCH_BASELINE })
    console.log(text)
    const file = path.join(__dirname, 'RESULTS.md')
    fs.writeFileSync(file, text + report.keptFindings(fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : ''))
    log('written to bench/RESULTS.md')
  } finally {
    if (server) await stopServer(server)
  }
}

main().catch(e => {
  console.error(e)
  process.exitCode = 1
})
