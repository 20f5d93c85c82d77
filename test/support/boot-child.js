// Starts the test app the way `cds serve` does (plugins first), then exits: a startup check for configurations.
// PRINT_QUEUE_OF names a service whose effective queue settings are printed as JSON (what `cds.queued(srv).queued` shows).
const cds = require('@sap/cds')

cds.exec('--port', '0').then(
  async () => {
    const name = process.env.PRINT_QUEUE_OF
    if (name) console.log(JSON.stringify(cds.queued(await cds.connect.to(name)).queued))
    await cds.shutdown()
  },
  e => {
    console.error(e.message)
    process.exit(3)
  }
)
