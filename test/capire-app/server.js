const cds = require('@sap/cds')

/** Deploys the model into the suite's database first, as `cds watch` does for a development database. */
module.exports = async function server(options) {
  if (process.env.TEST_APP_DEPLOY !== 'no') await cds.deploy('*').to(await cds.connect.to('db'))
  return cds.server(options)
}
