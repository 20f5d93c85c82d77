/**
 * `cds deploy` of a chaos app (CHAOS_APP, as process.js) to the seed's database (CDS_CONFIG), in a process of its own
 * before any app process starts, as a deployment pipeline runs it: no app process holds connections its deployment
 * opened.
 */
const path = require('path')

process.chdir(path.join(__dirname, process.env.CHAOS_APP ?? 'app'))
const cds = require('@sap/cds')

cds.plugins
  .then(async () => {
    await cds.deploy('*').to(await cds.connect.to('db'))
    await cds.disconnect?.()
    process.exit(0)
  })
  .catch(e => {
    console.error(e)
    process.exit(1)
  })
