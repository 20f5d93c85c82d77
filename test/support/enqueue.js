/**
 * Another instance that only enqueues: writes COUNT `record` messages for the Target service through the plugin's
 * API, in one transaction, and exits right after the commit, before its own runner could claim any of them, so
 * every message must be picked up by the other instances.
 */
const path = require('path')

process.chdir(path.join(__dirname, '..', 'app'))
const cds = require('@sap/cds')

async function main() {
  await cds.plugins
  cds.model = cds.compile.for.nodejs(await cds.load('*'))
  await cds.connect.to('db')
  // Constructed, not served: no 'served' event, so this process's runner never starts.
  const queued = cds.queued(await cds.serve('Target'))
  const count = Number(process.env.COUNT)
  await cds.tx(async () => {
    for (let n = 0; n < count; n++) await queued.emit('record', { n })
  })
}

main().then(
  () => process.exit(0),
  e => {
    console.error(e)
    process.exit(1)
  }
)
