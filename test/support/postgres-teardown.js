const { currentServer, stopServer } = require('./postgres')

/** jest globalTeardown of the "postgres" project: stops the run's server by its PID and removes its files. */
module.exports = async function stopPostgres() {
  await stopServer(currentServer())
}
