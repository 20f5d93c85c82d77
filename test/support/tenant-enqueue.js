/**
 * A multitenant app as @cap-js/sqlite alone makes one: the test app with `cds.requires.db.multiTenant: true` (from
 * CDS_CONFIG, which cds turns into `cds.requires.multitenancy: true`), a database file per tenant, no @sap/cds-mtxs.
 * It deploys its model into tenant TENANT's file as `cds deploy` would, then queues a message in a transaction of that
 * tenant, as a request of the tenant would, and prints "committed" once the commit returned; then it exits.
 */
const path = require('path')

process.chdir(path.join(__dirname, '..', 'app'))
const cds = require('@sap/cds')

async function main() {
  await cds.plugins
  cds.model = cds.compile.for.nodejs(await cds.load('*'))
  await cds.connect.to('db')
  const tenantFile = cds.env.requires.db.credentials.url.replace(/\.sqlite$/, `-${process.env.TENANT}.sqlite`)
  await cds.deploy('*').to(await cds.connect.to('tenant-db', { kind: 'sqlite', credentials: { url: tenantFile } }))
  const target = cds.queued(await cds.serve('Target'))
  await cds.tx({ tenant: process.env.TENANT }, () => target.emit('record', { n: 1 }))
  console.log('committed')
}

main().then(
  () => process.exit(0),
  e => {
    console.error(e)
    process.exit(1)
  }
)
