const { randomBytes } = require('crypto')
const server = require('../../scripts/postgres-server')

/**
 * The benchmark's PostgreSQL server (scripts/postgres-server.js), a database per measurement. BENCH_PG_SETTINGS
 * (JSON of server parameters) sets how it runs; the default is fsync off, as the figures so far were measured.
 */
const SETTINGS = JSON.parse(process.env.BENCH_PG_SETTINGS ?? '{"fsync":"off"}')

const startServer = () => server.startServer(SETTINGS)

/** A database name that no other measurement uses. */
const newDatabaseName = () => `bench_${randomBytes(6).toString('hex')}`

module.exports = {
  SETTINGS,
  startServer,
  stopServer: server.stopServer,
  newDatabaseName,
  createDatabase: server.createDatabase,
  withClient: server.withClient,
  dbConfig: server.dbConfig
}
