const fs = require('fs')
const os = require('os')
const path = require('path')
const { onPostgres } = require('./app')
const { startInstance, stopInstance } = require('./instances')

/**
 * CAP apps of the consumer-half suites, each a process of its own (consumer-instance.js) on a database of its own,
 * all stopped by their PIDs after the suite. `prefix` names the suite's temporary directory.
 */
function consumerApps(prefix) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `event-queues-${prefix}-`))
  const started = []
  afterAll(() => Promise.all(started.map(child => stopInstance(child))))
  return {
    dir,
    /** A database of its own for an app: a SQLite file, or a database on the run's PostgreSQL server. */
    async database(name) {
      if (!onPostgres()) return { kind: 'sqlite', credentials: { url: path.join(dir, `${name}.sqlite`) } }
      const postgres = require('./postgres')
      const database = postgres.newDatabaseName()
      await postgres.createDatabase(database)
      // the first connection to a database just created can take over @cap-js/postgres's 1 s acquire timeout on a
      // loaded machine, and the deployment fails (as test/support/app.js notes)
      const db = postgres.dbConfig(database)
      return { ...db, pool: { ...db.pool, acquireTimeoutMillis: 10000 } }
    },
    /** Starts an app on `db` with `env` and `requires`; leases of 2 s, so a killed process's claims expire soon. */
    async start(name, db, env, requires = {}, deploy = false) {
      const queue = { pollInterval: '300ms', timeout: '2s', backoff: { base: 50, max: 200 } }
      const child = await startInstance(db, { script: 'consumer-instance.js', name, env, requires, deploy, queue })
      started.push(child)
      return child
    }
  }
}

/** Resolves once `child` has exited (at once if it has). */
const exited = child => new Promise(resolve => (child.exitCode !== null || child.signalCode !== null ? resolve() : child.once('exit', resolve)))

/** What an app left in its queue table (GET /pending of consumer-instance.js). */
const pending = async app => (await fetch(`${app.url}/pending`)).json()

module.exports = { consumerApps, exited, pending }
