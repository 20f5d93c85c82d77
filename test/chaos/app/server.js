const cds = require('@sap/cds')

/** Deploys the model first when the checker asks for it (the first process on a new single-tenant database). */
module.exports = async function server(options) {
  if (process.env.CHAOS_DEPLOY === 'yes') await cds.deploy('*').to(await cds.connect.to('db'))
  return cds.server(options)
}
