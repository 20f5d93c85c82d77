const cds = require('@sap/cds')

module.exports = class TravelService extends cds.ApplicationService {
  async init() {
    const { Bookings, Flights, Notifications } = this.entities
    // Queued per package.json (`cds.requires.flights.outboxed`): calls are stored in the booking's transaction
    // and sent after commit, with retries.
    const flights = await cds.connect.to('flights')
    // Messaging services are queued too (`outboxed: true` in package.json).
    const messaging = await cds.connect.to('messaging')
    const remote = cds.unqueued(flights)

    const confirm = ({ booking, confirmation }) => UPDATE(Bookings, booking).set({ status: 'confirmed', confirmation })

    this.after('CREATE', 'Bookings', async (result, req) => {
      // req.data is the created booking on cds 9 and 10 alike (the shape of `result` differs between them)
      const booking = req.data
      const reserved = await flights.send('reserveSeats', { flight: booking.flight, seats: booking.seats, booking: booking.ID })
      // With `outboxed: false` the call ran right here, in this request: its result confirms the booking at once.
      // Queued, `send` resolves to undefined and the result arrives later through the callback below.
      if (reserved) {
        await confirm(reserved)
        for (const each of [booking, result]) if (each && typeof each === 'object') Object.assign(each, { status: 'confirmed', confirmation: reserved.confirmation })
      }
      await messaging.emit('travel/BookingCreated', { booking: booking.ID, flight: booking.flight })
    })

    // Outcomes of queued reservations: callbacks are queued messages themselves, so they are as durable as the call.
    remote.on('reserveSeats/#succeeded', req => confirm(req.results))
    remote.on('reserveSeats/#failed', req => UPDATE(Bookings, req.data.booking).set({ status: 'failed' }))

    // Events arrive at least once: one notification per booking and event, however often it arrives.
    cds.unqueued(messaging).on('travel/BookingCreated', async msg => {
      const notification = { event: msg.event, booking: msg.data.booking }
      if (await SELECT.one.from(Notifications).where(notification)) return
      await INSERT.into(Notifications).entries({ ID: cds.utils.uuid(), ...notification })
    })

    // The scheduled replication (see server.js): copies the remote flights into our replica.
    this.on('replicateFlights', async () => {
      const current = await remote.run(SELECT.from('FlightsService.Flights'))
      const replicatedAt = new Date().toISOString()
      if (current.length) await UPSERT.into(Flights).entries(current.map(f => ({ ...f, replicatedAt })))
    })

    return super.init()
  }
}
