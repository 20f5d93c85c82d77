const cds = require('@sap/cds')

// Replicate the remote flights every 5 seconds: a task that survives restarts and runs once per interval.
cds.once('served', () =>
  cds.tx(async () => {
    const travel = await cds.connect.to('TravelService')
    await travel.schedule('replicateFlights').every('5s')
  })
)

/** Deploys a fresh db.sqlite at every start, so each run of the walkthrough starts from the same data. */
module.exports = async function server(options) {
  await cds.deploy('*').to(await cds.connect.to('db'))
  return cds.server(options)
}
