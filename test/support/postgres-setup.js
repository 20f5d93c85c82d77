const { SERVER_ENV, startServer } = require('./postgres')

/** jest globalSetup of the "postgres" project: one real server for the whole run; suites create their own databases. */
module.exports = async function startPostgres() {
  const server = await startServer()
  // Test workers are started after globalSetup and inherit the environment.
  process.env[SERVER_ENV] = JSON.stringify(server)
}
