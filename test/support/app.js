const fs = require('fs')
const os = require('os')
const path = require('path')

const APP = path.join(__dirname, '..', 'app')
/** The second test app: written as a CAP developer writes one from capire, CAP's dead letter recipe copied in. */
const CAPIRE_APP = path.join(__dirname, '..', 'capire-app')

function isObject(x) {
  return x && typeof x === 'object' && !Array.isArray(x)
}

function merge(target, source) {
  for (const [key, value] of Object.entries(source)) {
    target[key] = isObject(value) && isObject(target[key]) ? merge({ ...target[key] }, value) : value
  }
  return target
}

/** A new, empty SQLite file for one suite (a real file: the queue's guarantees are about durable storage). */
function newDatabaseFile() {
  return path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'event-queues-')), 'db.sqlite')
}

/** Which database the suites run on: SQLite by default, PostgreSQL in the jest project "postgres" (TEST_DB=postgres). */
const onPostgres = () => process.env.TEST_DB === 'postgres'

/**
 * `cds.requires.db` for one suite: a new SQLite file, or on PostgreSQL a new database of the run's server (created
 * before cds.test connects, by a beforeAll registered ahead of cds.test's own).
 */
function suiteDatabase(dbFile) {
  if (!onPostgres()) return { db: { kind: 'sqlite', credentials: { url: dbFile ?? newDatabaseFile() } } }
  const postgres = require('./postgres')
  const database = postgres.newDatabaseName()
  beforeAll(() => postgres.createDatabase(database))
  const db = postgres.dbConfig(database)
  // A first connection to a database just created took over @cap-js/postgres's 1 s acquire timeout on the loaded CI
  // machine (two jest workers, servers and child processes on two cores), and the suite's deployment failed. Only
  // here: app processes (instances.js) keep the default, as the outage faults need renewals to fail within a lease.
  return { db: { ...db, pool: { ...db.pool, acquireTimeoutMillis: 10000 } }, database }
}

/**
 * Options every suite's `cds.requires.queue` gets in this jest project (TEST_QUEUE, JSON): the "-portable" projects
 * run the whole suite on the portable store (test/support/portable-env.js).
 */
function projectQueue() {
  return process.env.TEST_QUEUE ? JSON.parse(process.env.TEST_QUEUE) : {}
}

/** Whether this jest project runs the portable store (CQL only: no NOTIFY wake-up, no savepoint batches). */
const onPortableStore = () => projectQueue().store === 'portable'

/**
 * Starts the test app (or `app`) with cds.test on its own database, with `config` merged over the app's
 * package.json. Must be called at the top of a suite, before cds.env is read. `dbFile`/`deploy: false` (a suite
 * preparing its SQLite file itself) are SQLite-only: such suites are named *.sqlite.test.js and do not run on PostgreSQL.
 */
function startApp(config = {}, { dbFile, deploy = true, app = APP } = {}) {
  const { db, database } = suiteDatabase(dbFile)
  process.env.CDS_CONFIG = JSON.stringify(merge({ requires: { db, queue: projectQueue() } }, config))
  process.env.TEST_APP_DEPLOY = deploy ? 'yes' : 'no'
  const cds = require('@sap/cds')
  const test = cds.test(app)
  if (database) test.database = database
  else test.dbFile = db.credentials.url
  return test
}

module.exports = { APP, CAPIRE_APP, startApp, suiteDatabase, newDatabaseFile, merge, onPostgres, onPortableStore, projectQueue }
