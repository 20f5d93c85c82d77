const { waitFor } = require('../support/wait')
const { startExample } = require('../support/example')

/**
 * docs/EXAMPLE.md, the example app walkthrough, step by step, against the example app started as its own process,
 * the way `npm start` starts it (cds-serve in examples/travel), on a free port and a fresh SQLite file.
 */

const OPS = { username: 'ops', password: 'ops' }
const DLQ = '/odata/v4/event-queues'

const json = { headers: { 'content-type': 'application/json' } }
const asOps = { auth: OPS }

describe('example app walkthrough (queued remote call, dead letter, revive)', () => {
  let app, http
  beforeAll(async () => {
    app = await startExample()
    http = app.http
  }, 40000)
  afterAll(() => app?.stop())

  const booking = async ID => (await http.get(`/odata/v4/travel/Bookings(${ID})`)).data

  test('walks through booking, callback, messaging, replication, outage, dead letter, revive and statistics', async () => {
    // 1. Create a booking: the answer comes at once, the reservation is a queued message.
    const created = await http.post('/odata/v4/travel/Bookings', { flight: 'LH400', customer: 'Ada', seats: 2 }, json)
    expect(created.status).toBe(201)
    expect(created.data.status).toBe('requested')

    // 2. The message is dispatched after commit; its #succeeded callback confirms the booking.
    const confirmed = await waitFor(async () => {
      const b = await booking(created.data.ID)
      return b.status === 'confirmed' && b
    }, { what: 'the booking to be confirmed' })
    expect(confirmed.confirmation).toMatch(/^LH400-/)
    const flight = (await http.get(`/odata/v4/flights/Flights('LH400')`)).data
    expect(flight.freeSeats).toBe(118)

    // 3. The outboxed messaging service delivered BookingCreated to its subscriber.
    const notifications = (await http.get('/odata/v4/travel/Notifications')).data.value
    expect(notifications).toEqual([expect.objectContaining({ event: 'travel/BookingCreated', booking: created.data.ID })])

    // 4. The scheduled replication copies the remote flights every 5 seconds.
    await waitFor(async () => {
      const replica = (await http.get(`/odata/v4/travel/Flights('LH400')`)).data
      return replica.freeSeats === 118
    }, { timeout: 15000, what: 'the replication to pick up the new seat count' })

    // 5. Force failures: the flights service is down, the next booking is still accepted.
    expect((await http.post('/odata/v4/flights/simulateOutage', { failing: true }, json)).data.value).toBe(true)
    const second = await http.post('/odata/v4/travel/Bookings', { flight: 'LH454', customer: 'Grace', seats: 1 }, json)
    expect(second.status).toBe(201)

    // 6. After 3 failed attempts the reservation is a dead letter, and its #failed callback marks the booking.
    const dead = await waitFor(async () => (await http.get(`${DLQ}/DeadOutboxMessages`, asOps)).data.value[0], {
      timeout: 20000,
      what: 'the reservation to become a dead letter'
    })
    expect(dead).toMatchObject({ target: 'flights', attempts: 3, lastError: expect.stringContaining('Flights service unavailable') })
    expect(JSON.parse(dead.msg)).toMatchObject({ event: 'reserveSeats', data: { booking: second.data.ID } })
    await waitFor(async () => (await booking(second.data.ID)).status === 'failed', { what: 'the booking to be marked failed' })

    // The dead-letter service is for operators only.
    expect((await http.get(`${DLQ}/DeadOutboxMessages`)).status).toBe(401)
    expect((await http.get(`${DLQ}/DeadOutboxMessages`, { auth: { username: 'alice', password: 'alice' } })).status).toBe(403)

    // 7. Statistics per queue.
    const stats = (await http.get(`${DLQ}/statistics()`, asOps)).data.value
    expect(stats.find(s => s.queue === 'flights')).toMatchObject({ dead: 1, pending: 0 })

    // 8. The flights service is back; revive the dead letter: it runs right away and the booking is confirmed.
    await http.post('/odata/v4/flights/simulateOutage', { failing: false }, json)
    const revived = await http.post(`${DLQ}/DeadOutboxMessages(${dead.ID})/EventQueuesService.revive`, {}, { ...json, ...asOps })
    expect(revived.status).toBe(204)
    await waitFor(async () => (await booking(second.data.ID)).status === 'confirmed', { what: 'the revived booking to be confirmed' })
    expect((await http.get(`${DLQ}/DeadOutboxMessages`, asOps)).data.value).toEqual([])
  }, 60000)
})

describe('example app walkthrough with outboxed: false', () => {
  let app, http
  beforeAll(async () => {
    app = await startExample({ requires: { flights: { outboxed: false } } })
    http = app.http
  }, 40000)
  afterAll(() => app?.stop())

  test('the remote call runs inside the request: an outage fails the booking, otherwise it is confirmed at once', async () => {
    await http.post('/odata/v4/flights/simulateOutage', { failing: true }, json)
    const refused = await http.post('/odata/v4/travel/Bookings', { flight: 'LH400', customer: 'Ada', seats: 2 }, json)
    expect(refused.status).toBe(503)
    expect(refused.data.error.message).toMatch(/Flights service unavailable/)
    expect((await http.get('/odata/v4/travel/Bookings')).data.value).toEqual([])

    await http.post('/odata/v4/flights/simulateOutage', { failing: false }, json)
    const created = await http.post('/odata/v4/travel/Bookings', { flight: 'LH400', customer: 'Ada', seats: 2 }, json)
    expect(created.status).toBe(201)
    expect(created.data).toMatchObject({ status: 'confirmed', confirmation: expect.stringMatching(/^LH400-/) })
  }, 30000)
})
