/**
 * `node bench/claims.js` (issue 26, item 2): the claim alone, on one PostgreSQL database with its durable defaults.
 * N claimers (N = 1, 2, 4, 8: BENCH_CLAIMERS) each run the runner's own statements on a connection of their own in
 * this process, and do no work in between, so Node's CPU is not what limits them: a claim transaction (the claim's
 * UPDATE … SKIP LOCKED, the read-back of the claimed rows with their payloads, COMMIT), then the rows' DELETE as a
 * finished batch does, until a backlog of BENCH_BACKLOG (20,000) due no-op messages is gone; for a claim of up to
 * BENCH_LIMITS rows ("50,250"; the scale-out drain of bench/RESULTS.md claims about 270 per pass). Measured per run:
 * claims/s and rows/s, each statement's p50/p99, the bytes a claim returns, claims that found nothing while rows were
 * left, what the backends waited for (pg_stat_activity, sampled every 10 ms), WAL written per row (pg_stat_wal);
 * and once the claim's plan with EXPLAIN (ANALYZE, BUFFERS). Rewrites the figures of bench/SCALE-OUT.md, keeping its
 * hand-written findings. About 3 minutes on 2 cores.
 */
const fs = require('fs')
const os = require('os')
const path = require('path')
const { performance } = require('perf_hooks')
const { Client } = require('pg')
const { REPO, environment } = require('./support/app')
const { startServer, stopServer, withClient, dbConfig } = require('./support/postgres')
const { newDatabase } = require('./support/databases')
const { runOnce } = require('./support/processes')
const { percentile } = require('./support/stats')
const { claimPlan, indexAndAnalyze } = require('./support/claim-plan')
const { waitSampler } = require('./support/waits')
const { keptFindings, fixed, rate } = require('./support/report')

const statements = require(path.join(REPO, 'lib', 'store', 'statements'))
const { ownRowsSql } = require(path.join(REPO, 'lib', 'store', 'rules'))
const { postgres } = require(path.join(REPO, 'lib', 'store', 'postgres'))
const { executeOnPostgres } = require(path.join(REPO, 'lib', 'cap', 'drivers'))

const numbers = (value, fallback) => (value ?? fallback).split(',').map(Number)
const config = {
  backlog: Number(process.env.BENCH_BACKLOG ?? 20000),
  claimers: numbers(process.env.BENCH_CLAIMERS, '1,2,4,8'),
  limits: numbers(process.env.BENCH_LIMITS, '50,250'),
  sampleEvery: 10
}
const OUT = path.join(__dirname, 'SCALE-OUT.md')
const log = line => console.error(`[claims] ${line}`)
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

const own = ownRowsSql(undefined)
const ownE = ownRowsSql(undefined, 'e.')
/** Runs a statement of lib/store/statements.js as the native store does: a named prepared statement. */
const run = (client, { sql, params }) => executeOnPostgres(client, postgres.prepare(sql), params)

/**
 * One claimer: claim, read back, commit; then delete what it claimed. Returns when a claim finds nothing and no
 * unclaimed row is left (a claim can find nothing while others hold the last rows' locks).
 */
async function claimer(client, owner, limit, record) {
  for (;;) {
    const now = Date.now()
    const claimedAt = new Date(now).toISOString()
    const t0 = performance.now()
    await client.query('BEGIN')
    const { changes } = await run(client, statements.claim(own, ownE, postgres, owner, claimedAt, now + 3_600_000, limit, []))
    const t1 = performance.now()
    const rows = changes ? (await run(client, statements.claimedRows(postgres, owner, claimedAt))).rows : []
    const t2 = performance.now()
    await client.query('COMMIT')
    const t3 = performance.now()
    if (changes === 0) {
      const left = await client.query('SELECT 1 FROM cds_outbox_Messages WHERE status IS NULL LIMIT 1')
      if (left.rowCount === 0) return
      record.empty++
      continue
    }
    await run(client, statements.complete(rows.map(r => ({ ID: r.ID, claimedBy: owner, claimedAt: now }))))
    const t4 = performance.now()
    record.update.push(t1 - t0)
    record.read.push(t2 - t1)
    record.commit.push(t3 - t2)
    record.claim.push(t3 - t0)
    record.complete.push(t4 - t3)
    record.rows += rows.length
    record.bytes += rows.reduce((sum, r) => sum + Buffer.byteLength(JSON.stringify(r)), 0)
  }
}

/** The WAL position in bytes (pg_stat_wal lags: backends report to it in their own time). */
const walNow = client => client.query("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint AS at").then(r => Number(r.rows[0].at))

/** A fresh database with `config.backlog` due no-op messages, written by the bench app (bench/instance.js 'fill'). */
async function filled(server) {
  const { db, database, cleanup } = await newDatabase('postgres', server)
  await runOnce('instance.js', environment('plugin', db, { BENCH_ROLE: 'fill', BENCH_COUNT: String(config.backlog) }))
  await withClient(indexAndAnalyze, database, server)
  return { database, drop: cleanup }
}

async function measure(server, claimers, limit) {
  const { database, drop } = await filled(server)
  const clients = []
  try {
    for (let i = 0; i < claimers; i++) {
      const client = new Client(dbConfig(database, server).credentials)
      await client.connect()
      clients.push(client)
    }
    return await withClient(async monitor => {
      const waits = waitSampler(monitor, database)
      const walBefore = await walNow(monitor)
      const record = { update: [], read: [], commit: [], claim: [], complete: [], rows: 0, bytes: 0, empty: 0 }
      const startAt = performance.now()
      let done = false
      const all = Promise.all(clients.map((c, i) => claimer(c, `bench-${i}`, limit, record))).finally(() => (done = true))
      while (!done) {
        await waits.sample()
        await sleep(config.sampleEvery)
      }
      await all
      const seconds = (performance.now() - startAt) / 1000
      const walAfter = await walNow(monitor)
      return { claimers, limit, seconds, ...record, waits: waits.counts, walBytes: walAfter - walBefore }
    }, database, server)
  } finally {
    await Promise.all(clients.map(c => c.end()))
    await drop()
  }
}

async function plans(server) {
  const { database, drop } = await filled(server)
  try {
    const result = {}
    for (const limit of config.limits) result[limit] = await withClient(client => claimPlan(client, limit), database, server)
    return result
  } finally {
    await drop()
  }
}

const p = (values, q) => fixed(percentile(values, q), 1)

function render(results, plansByLimit, startedAt, version) {
  const one = {}
  for (const r of results) if (r.claimers === 1) one[r.limit] = r
  const perClaim = r => r.update.length
  const waiting = (r, field) => fixed(r.waits[field] / r.waits.samples, 2)
  const hottest = r => Object.entries(r.waits.events).sort((a, b) => b[1] - a[1]).slice(0, 2)
    .map(([event, n]) => `${event} ${fixed(n / r.waits.samples, 2)}`).join(', ') || '—'
  const rows = results.map(r =>
    `| ${r.limit} | ${r.claimers} | ${rate(perClaim(r) / r.seconds)} | ${rate(r.rows / r.seconds)} | ${fixed(r.rows / r.seconds / (one[r.limit].rows / one[r.limit].seconds), 2)}× | ` +
    `${fixed(r.rows / perClaim(r), 0)} | ${p(r.claim, 50)} / ${p(r.claim, 99)} | ${p(r.update, 50)} | ${p(r.read, 50)} | ${p(r.commit, 50)} | ${p(r.complete, 50)} | ` +
    `${rate(r.bytes / perClaim(r))} | ${r.empty} | ${waiting(r, 'cpu')} | ${waiting(r, 'lock')} | ${waiting(r, 'lwlock')} | ${waiting(r, 'io')} | ${hottest(r)} | ${rate(r.walBytes / r.rows)} |`)
  return [
    '# The claim alone, and what limits N instances (issue 26, item 2)',
    '',
    `Figures of \`node bench/claims.js\`, ${startedAt.toISOString().slice(0, 16)} UTC, ${os.cpus().length} cores, ${version};`,
    `load average before ${os.loadavg().map(v => v.toFixed(1)).join(' / ')} (1/5/15 min). A backlog of ${rate(config.backlog)} due no-op messages`,
    'per run, a fresh database each; claimers in one Node process, one connection each, doing no work between claims.',
    '',
    '| claim limit | claimers | claims/s | rows/s | rows/s vs 1 claimer | rows/claim | claim tx p50 / p99 (ms) | UPDATE p50 | read-back p50 | COMMIT p50 | DELETE p50 | bytes/claim | empty claims | backends on CPU | Lock | LWLock | IO | hottest waits | WAL bytes/row |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
    ...rows,
    '',
    'Columns: the claim transaction is BEGIN, the claim\'s UPDATE (candidates `ORDER BY dueAt LIMIT n FOR UPDATE SKIP',
    'LOCKED`, a running sum of their payload sizes for `maxClaimBytes`), the read-back of the claimed rows with their',
    'payloads, COMMIT (durable: it waits for the WAL flush). DELETE is the completion of the claimed rows as one',
    'statement (a finished batch deletes its rows in its own transaction, here in autocommit). Backends: the mean number of',
    'the database\'s active backends, per sample, on the CPU (no wait event) or waiting on a Lock, LWLock or IO;',
    '"hottest waits" the two most frequent wait events. "Empty claims": claims that found no row while rows were left',
    '(all candidates locked by other claimers: SKIP LOCKED). WAL bytes/row: how far the WAL position advanced over the run (claim and delete), per row.',
    '',
    ...Object.entries(plansByLimit).flatMap(([limit, plan]) => [
      `The claim's plan at a limit of ${limit}, one claimer, on the same backlog (EXPLAIN (ANALYZE, BUFFERS), rolled back):`,
      '',
      '```',
      ...plan,
      '```',
      ''
    ])
  ].join('\n')
}

async function main() {
  const startedAt = new Date()
  const server = await startServer()
  try {
    const version = await withClient(c => c.query('SHOW server_version').then(r => `PostgreSQL ${r.rows[0].server_version}`), 'postgres', server)
    const results = []
    for (const limit of config.limits) {
      for (const claimers of config.claimers) {
        log(`claim limit ${limit}, ${claimers} claimer(s)`)
        results.push(await measure(server, claimers, limit))
      }
    }
    log('plans')
    const plansByLimit = await plans(server)
    const previous = fs.existsSync(OUT) ? fs.readFileSync(OUT, 'utf8') : ''
    const text = render(results, plansByLimit, startedAt, version)
    fs.writeFileSync(OUT, text + '\n' + keptFindings(previous))
    console.log(text)
  } finally {
    await stopServer(server)
  }
}

main().catch(e => {
  console.error(e)
  process.exitCode = 1
})
