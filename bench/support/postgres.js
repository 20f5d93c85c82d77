const { randomBytes } = require('crypto')
const server = require('../../scripts/postgres-server')

/**
 * The benchmark's PostgreSQL servers (scripts/postgres-server.js), a database per measurement. The default is
 * durable, PostgreSQL's own defaults (fsync on, synchronous_commit on), as production runs; BENCH_PG_SETTINGS (JSON
 * of server parameters) overrides it. The fsync=off server is the extra column only: what the test suite runs with.
 */
const DURABLE = JSON.parse(process.env.BENCH_PG_SETTINGS ?? '{}')
const FSYNC_OFF = { fsync: 'off' }

const startServer = (settings = DURABLE) => server.startServer(settings)

/** A database name that no other measurement uses. */
const newDatabaseName = () => `bench_${randomBytes(6).toString('hex')}`

module.exports = {
  DURABLE,
  FSYNC_OFF,
  startServer,
  stopServer: server.stopServer,
  newDatabaseName,
  createDatabase: server.createDatabase,
  withClient: server.withClient,
  dbConfig: server.dbConfig
}
