const cds = require('@sap/cds')

/**
 * How the travel app reaches the flights system: `cds.requires.flights`. Here it forwards in-process to the simulated
 * FlightsService; against a real system this entry would be `kind: 'odata'` with credentials, and nothing else changes.
 */
module.exports = class FlightsClient extends cds.Service {
  async init() {
    const flights = await cds.connect.to('FlightsService')
    this.on('*', req => (req.query ? flights.run(req.query) : flights.send(req.event, req.data)))
    return super.init()
  }
}
