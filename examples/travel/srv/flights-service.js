const cds = require('@sap/cds')

/** The outage switch: while it is on, every reservation fails like an unreachable remote system would. */
let failing = false

module.exports = class FlightsService extends cds.ApplicationService {
  init() {
    const { Flights } = this.entities

    this.on('simulateOutage', req => (failing = !!req.data.failing))

    const { Reservations } = cds.entities('flights')

    this.on('reserveSeats', async req => {
      const { flight, seats, booking } = req.data
      if (failing) return req.reject(503, `Flights service unavailable: no seats reserved on ${flight}`)
      // Queued calls arrive at least once: a booking's reservation that comes again gets the first one's answer.
      const earlier = await SELECT.one.from(Reservations).where({ booking })
      if (earlier) return { booking, confirmation: earlier.confirmation }
      const reserved = await UPDATE(Flights, flight).set({ freeSeats: { '-=': seats } }).where({ freeSeats: { '>=': seats } })
      if (!reserved) return req.reject(409, `Flight ${flight} has no ${seats} free seats`)
      const confirmation = `${flight}-${booking.slice(0, 8).toUpperCase()}`
      await INSERT.into(Reservations).entries({ booking, flight, seats, confirmation })
      return { booking, confirmation }
    })

    return super.init()
  }
}
