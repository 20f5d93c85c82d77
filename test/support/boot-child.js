// Starts the test app the way `cds serve` does (plugins first), then exits: a startup check for configurations.
const cds = require('@sap/cds')

cds.exec('serve', '--port', '0').then(
  () => cds.shutdown(),
  e => {
    console.error(e.message)
    process.exit(3)
  }
)
