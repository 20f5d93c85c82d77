const cds = require('@sap/cds')
const { queuedBy, expectQueued, outcome, expectIdempotent } = require('cds-event-queues/test')

// The travel app's own tests of its queued work, as a CAP project writes them with cds.test and the plugin's test
// helpers. In the [test] profile (package.json) every message is delivered twice (cds.requires.queue.deliver), so
// each test also shows that the handlers it ran are idempotent.
const { GET, POST } = cds.test(__dirname + '/..')

describe('travel: queued work', () => {
  afterEach(() => expectIdempotent())

  const booking = async ID => (await GET(`/odata/v4/travel/Bookings(${ID})`)).data
  const freeSeats = async flight => (await GET(`/odata/v4/flights/Flights('${flight}')`)).data.freeSeats
  const notifications = async ID => (await GET(`/odata/v4/travel/Notifications?$filter=booking eq ${ID}`)).data.value

  test('creating a booking queues the seat reservation and BookingCreated in its own transaction, and nothing if it rolls back', async () => {
    const travel = await cds.connect.to('TravelService')
    const { Bookings } = travel.entities
    const create = () => travel.run(INSERT.into(Bookings).entries({ flight: 'LH400', customer: 'Ada', seats: 2 }))
    const expected = [
      { service: 'flights', event: 'reserveSeats', data: { flight: 'LH400', seats: 2 } },
      { service: 'messaging', event: 'travel/BookingCreated', data: { flight: 'LH400' } }
    ]
    await expectQueued(create, expected, { rollback: true })
    const [reservation, created] = await expectQueued(create, expected)
    expect(created.data.booking).toBe(reservation.data.booking)
    await cds.flush()
  })

  test('a booking is confirmed once its reservation ran: seats reserved and BookingCreated noted once, though each message came twice', async () => {
    const seats = await freeSeats('LH454')
    const [reservation, created] = await queuedBy(() => POST('/odata/v4/travel/Bookings', { flight: 'LH454', customer: 'Grace', seats: 3 }))
    expect([reservation.event, created.event]).toEqual(['reserveSeats', 'travel/BookingCreated'])
    const { booking: ID } = reservation.data

    expect(await outcome(reservation)).toMatchObject({ kind: 'succeeded' })
    // its #succeeded callback confirms the booking; the messaging subscriber notes it
    await cds.flush()
    expect(await booking(ID)).toMatchObject({ status: 'confirmed', confirmation: expect.stringMatching(/^LH454-/) })
    expect(await freeSeats('LH454')).toBe(seats - 3)
    expect(await notifications(ID)).toHaveLength(1)
  })

  test('during an outage the reservation is retried, then a dead letter, and the booking is marked failed', async () => {
    await POST('/odata/v4/flights/simulateOutage', { failing: true })
    try {
      const [reservation] = await queuedBy(() => POST('/odata/v4/travel/Bookings', { flight: 'LH400', customer: 'Linus', seats: 1 }))
      expect(await outcome(reservation, { kind: 'retried' })).toMatchObject({ kind: 'retried' })
      expect(await outcome(reservation)).toMatchObject({ kind: 'dead' })
      // its #failed callback marks the booking
      await cds.flush()
      expect(await booking(reservation.data.booking)).toMatchObject({ status: 'failed' })
    } finally {
      await POST('/odata/v4/flights/simulateOutage', { failing: false })
    }
  })
})
