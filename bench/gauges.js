/**
 * `node bench/gauges.js`: what the queue's gauges, its health check and its retention cost on a large table, on an
 * embedded PostgreSQL server. The table gets BENCH_ROWS rows (default 1,000,000) over 10 queues: 5% dead letters,
 * 5% processing, 5% parked behind an ordering key, 10% delayed, the rest pending; then, each BENCH_REPS times
 * (default 7), median in ms:
 * - the statistics the gauges and the health check's lag read (one statement on the native store, three on the
 *   portable one), against the operator service's statistics() (four grouped queries) on the same table;
 * - a scrape of the gauges within `statisticsInterval` (the cached sample: no statement);
 * - the health check's ping;
 * - one retention batch (500 dead letters past a 30-day retention), its own transaction, on each store.
 * It measures; it does not pass or fail.
 */
const path = require('path')

const config = {
  rows: Number(process.env.BENCH_ROWS ?? 1_000_000),
  reps: Number(process.env.BENCH_REPS ?? 7)
}
const log = (...args) => console.error('[bench:gauges]', ...args)
const REPO = path.join(__dirname, '..')
const DAY = 86_400_000

/** The table as a busy app leaves it, written by the database itself (generate_series) in a few seconds. */
function fill(rows) {
  return `INSERT INTO cds_outbox_Messages (ID, timestamp, target, msg, attempts, dueAt, status, claimedBy, claimedAt, lastAttemptTimestamp, orderingKey, interrupted)
    SELECT md5(i::text)::uuid::text,
      now() - (i % 86400) * interval '1 second' + CASE WHEN i % 20 = 4 OR i % 20 = 5 THEN interval '1 day' ELSE interval '0' END,
      'queue-' || (i % 10),
      '{"cds.internal.user":"anonymous","service":"Bench","context":{},"event":"noop","data":{}}',
      CASE WHEN i % 20 = 0 THEN 10 ELSE 0 END,
      CASE i % 20 WHEN 0 THEN NULL WHEN 1 THEN now() + interval '1 hour' WHEN 2 THEN '9999-12-31T00:00:00.000Z'
        WHEN 4 THEN now() + interval '1 day' WHEN 5 THEN now() + interval '1 day' ELSE now() - (i % 86400) * interval '1 second' END,
      CASE WHEN i % 20 = 1 THEN 'processing' END,
      CASE WHEN i % 20 = 1 THEN 'bench' END,
      CASE WHEN i % 20 = 1 THEN now() END,
      CASE WHEN i % 20 = 0 THEN now() - interval '60 days' WHEN i % 20 = 1 THEN now() END,
      CASE WHEN i % 20 = 2 THEN 'key-' || (i % 1000) END,
      0
    FROM generate_series(1, ${rows}) AS i`
}

/** Median ms of `reps` runs of `fn`. */
async function timed(reps, fn) {
  const { median } = require('./support/stats')
  const samples = []
  for (let rep = 0; rep < reps; rep++) {
    const started = process.hrtime.bigint()
    await fn()
    samples.push(Number(process.hrtime.bigint() - started) / 1e6)
  }
  return { median: median(samples), samples }
}

/** Child: boots the bench app with the plugin (runner not started, so nothing changes the rows), fills, measures. */
async function child() {
  setInterval(() => {}, 60_000) // keep alive until the figures are sent
  const { boot } = require('./support/app')
  const { cds } = await boot()
  const { eventQueues } = require(path.join(REPO, 'lib', 'plugin'))
  const { PortableStore } = require(path.join(REPO, 'lib', 'store', 'portable'))
  const { OperatorQueries } = require(path.join(REPO, 'lib', 'ops', 'queries'))
  const { settings, runner, statistics } = eventQueues()
  const native = runner.store
  const portable = new PortableStore(settings.appid)
  const limits = settings.queues.attemptLimits()
  const retentions = { byRetention: new Map(), otherwise: 30 * DAY }

  let started = Date.now()
  await cds.tx(() => native.ensureIndexes())
  await cds.db.run(fill(config.rows))
  await cds.db.run('ANALYZE cds_outbox_Messages')
  log(`${config.rows} rows written and analyzed in ${Date.now() - started} ms`)

  const figures = {}
  const measure = async (name, fn) => {
    figures[name] = await timed(config.reps, fn)
    log(name, `${figures[name].median.toFixed(1)} ms`)
  }
  const [sample] = await cds.tx(() => native.queueStatistics(limits, Date.now()))
  log('one queue as the gauges see it:', JSON.stringify(sample))
  await measure('statistics, native store (1 statement)', () => cds.tx(() => native.queueStatistics(limits, Date.now())))
  await measure('statistics, portable store (3 statements)', () => cds.tx(() => portable.queueStatistics(limits, Date.now())))
  await measure("operator service's statistics() (4 statements)", () => cds.tx(() => new OperatorQueries(settings.queues, settings.appid).statistics()))
  await statistics.current() // the sample the next scrapes share
  await measure('a scrape within statisticsInterval (cached sample)', () => statistics.current())
  await measure('health ping', () => cds.tx(() => native.ping()))
  started = Date.now()
  await measure('retention batch of 500, native store', () => cds.tx(() => native.deleteExpiredDeadLetters(limits, retentions, Date.now(), 500)))
  await measure('retention batch of 500, portable store', () => cds.tx(() => portable.deleteExpiredDeadLetters(limits, retentions, Date.now(), 500)))
  const [{ left }] = await cds.db.run('SELECT count(*) AS "left" FROM cds_outbox_Messages')
  await new Promise(resolve => process.send({ figures, rows: config.rows, left: Number(left) }, resolve))
}

async function parent() {
  const { startServer, stopServer, createDatabase, dbConfig, newDatabaseName } = require('./support/postgres')
  const { environment } = require('./support/app')
  const { runOnce } = require('./support/processes')
  const server = await startServer()
  let result
  try {
    const database = newDatabaseName()
    await createDatabase(database, server)
    result = await runOnce('gauges.js', environment('plugin', dbConfig(database, server), { BENCH_GAUGES_CHILD: 'yes' }))
  } finally {
    await stopServer(server)
  }
  console.log(`PostgreSQL, ${result.rows} rows in cds.outbox.Messages (${result.left} left after the retention batches), median of ${config.reps} in ms:\n`)
  console.log('| what | median ms | runs |\n|---|---|---|')
  for (const [name, { median, samples }] of Object.entries(result.figures)) {
    console.log(`| ${name} | ${median.toFixed(1)} | ${samples.map(s => s.toFixed(1)).join(', ')} |`)
  }
}

require('./support/processes').runScript('BENCH_GAUGES_CHILD', child, parent)
