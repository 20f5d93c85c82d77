const cds = require('@sap/cds')

/** Deploys the model into the suite's SQLite file first, unless the suite prepared that file itself. */
module.exports = async function server(options) {
  if (process.env.TEST_APP_DEPLOY !== 'no') await cds.deploy('*').to(await cds.connect.to('db'))
  return cds.server(options)
}
