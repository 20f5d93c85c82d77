/**
 * `node bench/receipts.js`: what the consumer half's receipts (`cds.outbox.Receipts`, db/consumer.cds) cost at
 * BENCH_RECEIPTS recorded IDs (default 1,000,000), on a SQLite file and on an embedded PostgreSQL server: the rows'
 * storage, and each BENCH_REPS times (default 200; median and 95th percentile in ms of the statements, in one open
 * transaction, so a commit's flush to disk is not part of the figure):
 * - the inbox's receipt of a new message ID and of a redelivery (the native store's upsert; the portable store's CQL),
 *   and the look-up under the key earlier versions recorded (the ID alone) that precedes each;
 * - marking a receipt processed (the subscriber's transaction);
 * - an @idempotent operation's look-up of a key;
 * - a pruning batch of 500 expired receipts.
 * A tenth of the receipts is expired, the others expire over the next 7 days (the default receiptRetention), as a week
 * of traffic leaves them. It measures; it does not pass or fail.
 */
const path = require('path')

const config = {
  rows: Number(process.env.BENCH_RECEIPTS ?? 1_000_000),
  reps: Number(process.env.BENCH_REPS ?? 200)
}
const log = (...args) => console.error('[bench:receipts]', ...args)
const REPO = path.join(__dirname, '..')
const SCOPE = 'inbox:Bench'

/** An inbox's receipt key: a CloudEvent's source and id (lib/receipts/inbox.ts), of SQL text `id`. */
const eventKey = id => `'{"source":"/default/sap.cap/orders","id":"' || ${id} || '"}'`

/** The receipts as a week of an inbox leaves them, written by the database itself. */
const FILL = {
  sqlite: rows => `INSERT INTO cds_outbox_Receipts (scope, ID, state, duplicates, recordedAt, expiresAt)
    WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${rows})
    SELECT '${SCOPE}', ${eventKey("printf('%08x-%04x-4%03x-8%03x-%012x', i, i % 65536, i % 4096, (i * 7) % 4096, i * 7919)")}, 'done', 0,
      strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || (i % 86400) || ' seconds'),
      strftime('%Y-%m-%dT%H:%M:%fZ', 'now', CASE WHEN i % 10 = 0 THEN '-' ELSE '+' END || (i % 604800) || ' seconds')
    FROM n`,
  postgres: rows => `INSERT INTO cds_outbox_Receipts (scope, ID, state, duplicates, recordedAt, expiresAt)
    SELECT '${SCOPE}', ${eventKey('md5(i::text)::uuid::text')}, 'done', 0, now() - (i % 86400) * interval '1 second',
      now() + CASE WHEN i % 10 = 0 THEN -1 ELSE 1 END * (i % 604800) * interval '1 second'
    FROM generate_series(1, ${rows}) AS i`
}

/** What the table and its indexes occupy, in bytes: SQLite's dbstat (or the file's pages), PostgreSQL's catalog. */
const SIZE = {
  sqlite: async cds => {
    try {
      const [{ bytes }] = await cds.db.run("SELECT SUM(pgsize) AS bytes FROM dbstat WHERE name LIKE '%cds_outbox_Receipts%'")
      return { table: undefined, indexes: undefined, total: Number(bytes) }
    } catch {
      const [{ page_count }] = await cds.db.run('PRAGMA page_count')
      const [{ page_size }] = await cds.db.run('PRAGMA page_size')
      return { table: undefined, indexes: undefined, total: page_count * page_size, file: true }
    }
  },
  postgres: async cds => {
    const [row] = await cds.db.run(`SELECT pg_relation_size('cds_outbox_receipts') AS "table", pg_indexes_size('cds_outbox_receipts') AS "indexes",
      pg_total_relation_size('cds_outbox_receipts') AS "total"`)
    return { table: Number(row.table), indexes: Number(row.indexes), total: Number(row.total) }
  }
}

/** Median and 95th percentile of `reps` runs of `fn(i)`, in ms. */
async function timed(reps, fn) {
  const samples = []
  for (let i = 0; i < reps; i++) {
    const started = process.hrtime.bigint()
    await fn(i)
    samples.push(Number(process.hrtime.bigint() - started) / 1e6)
  }
  samples.sort((a, b) => a - b)
  return { median: samples[Math.floor(samples.length / 2)], p95: samples[Math.floor(samples.length * 0.95)] }
}

/** Child: boots the bench app with the plugin on BENCH_DB, fills the receipts, measures. */
async function child() {
  setInterval(() => {}, 60_000) // keep alive until the figures are sent
  const { boot } = require('./support/app')
  const { cds } = await boot()
  const kind = cds.db.kind
  const { eventQueues } = require(path.join(REPO, 'lib', 'plugin'))
  const { PortableStore } = require(path.join(REPO, 'lib', 'store', 'portable'))
  const receipts = require(path.join(REPO, 'lib', 'receipts', 'receipts'))
  const native = eventQueues().runner.store
  const portable = new PortableStore(undefined)

  const started = Date.now()
  await cds.db.run(FILL[kind](config.rows))
  await cds.db.run(kind === 'postgres' ? 'ANALYZE cds_outbox_Receipts' : 'ANALYZE')
  const [{ rows }] = await cds.db.run('SELECT count(*) AS "rows" FROM cds_outbox_Receipts')
  log(`${kind}: ${rows} receipts written and analyzed in ${Date.now() - started} ms`)
  const size = await SIZE[kind](cds)

  const recorded = await cds.db.run(`SELECT ID AS "ID" FROM cds_outbox_Receipts WHERE scope = '${SCOPE}' LIMIT ${config.reps}`)
  const recordedRef = i => ({ scope: SCOPE, ID: recorded[i % recorded.length].ID })
  const fresh = (prefix, i) => ({ scope: SCOPE, ID: JSON.stringify({ source: '/default/sap.cap/orders', id: `${prefix}-${i}-${cds.utils.uuid()}` }) })
  const figures = {}
  const measure = async (name, fn, reps = config.reps) => {
    figures[name] = await cds.tx(() => timed(reps, fn))
    log(kind, name, `${figures[name].median.toFixed(2)} ms`)
  }
  await measure('inbox: receipt of a new message ID (native store, 1 upsert)', i => native.receive(fresh('n', i), Date.now()))
  await measure('inbox: redelivery of a recorded ID, counted (native store, 1 upsert)', i => native.receive(recordedRef(i), Date.now()))
  await measure("inbox: look-up under an earlier version's key, none there (native store, 1 UPDATE)", i => native.countRedelivery(fresh('f', i)))
  await measure('inbox: receipt of a new message ID (portable store, UPDATE + INSERT)', i => portable.receive(fresh('p', i), Date.now()))
  await measure('inbox: redelivery of a recorded ID, counted (portable store, 1 UPDATE)', i => portable.receive(recordedRef(i), Date.now()))
  await measure("inbox: receipt marked processed (subscriber's transaction, 1 UPDATE)", i => receipts.recordProcessed(recordedRef(i), Date.now(), 7 * 86_400_000))
  await measure('@idempotent: look-up of a key (1 SELECT)', i => receipts.recordedResponse(recordedRef(i)))
  const before = Number((await cds.db.run('SELECT count(*) AS "n" FROM cds_outbox_Receipts'))[0].n)
  await measure('pruning: a batch of 500 expired receipts (SELECT + DELETE)', () => receipts.pruneExpired(Date.now(), 500), Math.min(config.reps, 50))
  const after = Number((await cds.db.run('SELECT count(*) AS "n" FROM cds_outbox_Receipts'))[0].n)
  log(kind, 'pruned', before - after)
  await new Promise(resolve => process.send({ kind, rows: Number(rows), size, figures, pruned: before - after }, resolve))
}

const mb = bytes => (bytes / 1024 / 1024).toFixed(1)

async function parent() {
  const { startServer, stopServer } = require('./support/postgres')
  const { newDatabase } = require('./support/databases')
  const { environment } = require('./support/app')
  const { runOnce } = require('./support/processes')
  const server = await startServer()
  const results = []
  try {
    for (const kind of ['sqlite', 'postgres']) {
      const { db, cleanup } = await newDatabase(kind, server)
      try {
        results.push(await runOnce('receipts.js', environment('plugin', db, { BENCH_RECEIPTS_CHILD: 'yes' })))
      } finally {
        await cleanup()
      }
    }
  } finally {
    await stopServer(server)
  }
  for (const { kind, rows, size, figures, pruned } of results) {
    const parts = size.table === undefined ? '' : ` (table ${mb(size.table)} MiB, indexes ${mb(size.indexes)} MiB)`
    console.log(`\n${kind === 'sqlite' ? 'SQLite' : 'PostgreSQL'}: ${rows.toLocaleString('en')} receipts occupy ${mb(size.total)} MiB${size.file ? ' of the file' : ''}${parts}, ${Math.round(size.total / rows)} bytes per receipt; ${pruned} pruned by the batches below.\n`)
    console.log(`| what, ${rows.toLocaleString('en')} receipts | median ms | p95 ms |\n|---|---:|---:|`)
    for (const [name, { median, p95 }] of Object.entries(figures)) console.log(`| ${name} | ${median.toFixed(2)} | ${p95.toFixed(2)} |`)
  }
}

require('./support/processes').runScript('BENCH_RECEIPTS_CHILD', child, parent)
