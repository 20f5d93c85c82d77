const { randomBytes } = require('crypto')
const server = require('../../scripts/postgres-server')

/**
 * The test run's PostgreSQL server (scripts/postgres-server.js): one per jest run (globalSetup), one database per
 * suite. Test data need not survive a machine crash: fsync is off.
 */

/** Where globalSetup publishes the server to the test workers (they inherit the environment). */
const SERVER_ENV = 'TEST_PG_SERVER'

const startServer = () => server.startServer({ fsync: 'off' })

/** The run's server, as globalSetup published it. */
function currentServer() {
  const json = process.env[SERVER_ENV]
  if (!json) throw new Error(`No PostgreSQL server for this run (${SERVER_ENV} not set): run the suite through the "postgres" jest project`)
  return JSON.parse(json)
}

/** A database name that no other suite uses. */
function newDatabaseName() {
  return `test_${randomBytes(6).toString('hex')}`
}

const withClient = (fn, database = 'postgres', on = currentServer()) => server.withClient(fn, database, on)
const createDatabase = (name, on = currentServer()) => server.createDatabase(name, on)
const dbConfig = (database, on = currentServer()) => server.dbConfig(database, on)

module.exports = {
  SERVER_ENV,
  startServer,
  haltServer: server.haltServer,
  restartServer: server.restartServer,
  stopServer: server.stopServer,
  currentServer,
  newDatabaseName,
  createDatabase,
  withClient,
  dbConfig
}
