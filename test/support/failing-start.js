/**
 * The test app started as `cds serve` starts it, with a `served` handler of the app's own that fails: FAIL_ON_SERVED
 * `throw` (an error in the app's code) or `schedule` (an invalid `srv.schedule(...)`). Like the cds CLI, it prints the
 * error, sets exit code 1 and leaves the process to end by itself once nothing holds it open.
 */
const path = require('path')

process.chdir(path.join(__dirname, '..', 'app'))
const cds = require('@sap/cds')

const failures = {
  throw: () => {
    throw new Error('the app failed to start (test)')
  },
  schedule: async () => {
    const srv = await cds.connect.to('Target')
    await srv.schedule('tick').every('soon')
  }
}

async function main() {
  // The app's own code (server.js, service implementations) is loaded after the plugins: its handler runs after theirs.
  await cds.plugins
  cds.on('served', failures[process.env.FAIL_ON_SERVED])
  cds.on('listening', ({ url }) => console.log(`listening on ${url}`))
  await cds.exec('--port', '0')
}

main().catch(e => {
  console.error(e.message)
  process.exitCode = 1
})
