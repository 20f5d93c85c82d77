/**
 * CAP contracts that need a process of their own (they end it): CHECK names which. Prints one JSON line.
 * - `disconnect-on-shutdown`: a database service disconnects through its own `disconnect` when cds emits 'shutdown';
 * - `listening-after-served`: `cds serve` says it is 'serve' in `cds.cli.command` and emits 'listening' after every
 *   'served' handler completed, also one that takes its time.
 */
const path = require('path')

process.chdir(path.join(__dirname, '..', 'app'))
const cds = require('@sap/cds')

const checks = {
  'disconnect-on-shutdown': async () => {
    const { beforeDisconnect } = require('../../lib/cap/lifecycle')
    const db = await cds.connect.to('db')
    let called = false
    beforeDisconnect(db, async () => void (called = true))
    // what `cds serve` does on SIGTERM or cds.shutdown(): await every 'shutdown' listener
    await Promise.all(cds.listeners('shutdown').map(fn => fn()))
    return { called }
  },
  'listening-after-served': async () => {
    const events = []
    await cds.plugins
    cds.on('served', async () => {
      events.push(`served: ${cds.cli.command}`)
      await new Promise(resolve => setTimeout(resolve, 200))
      events.push('served handler done')
    })
    cds.on('listening', () => events.push('listening'))
    await cds.exec('--port', '0')
    return { events }
  }
}

checks[process.env.CHECK]().then(
  result => {
    console.log(JSON.stringify(result))
    process.exit(0)
  },
  e => {
    console.error(e)
    process.exit(1)
  }
)
