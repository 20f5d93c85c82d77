const cds = require('@sap/cds')

/** The outage switch: while it is on, every reservation fails like an unreachable remote system would. */
let failing = false

module.exports = class FlightsService extends cds.ApplicationService {
  init() {
    const { Flights } = this.entities

    this.on('simulateOutage', req => (failing = !!req.data.failing))

    this.on('reserveSeats', async req => {
      const { flight, seats, booking } = req.data
      if (failing) return req.reject(503, `Flights service unavailable: no seats reserved on ${flight}`)
      const reserved = await UPDATE(Flights, flight).set({ freeSeats: { '-=': seats } }).where({ freeSeats: { '>=': seats } })
      if (!reserved) return req.reject(409, `Flight ${flight} has no ${seats} free seats`)
      return { booking, confirmation: `${flight}-${booking.slice(0, 8).toUpperCase()}` }
    })

    return super.init()
  }
}
