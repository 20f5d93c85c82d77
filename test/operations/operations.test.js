const { onPostgres } = require('../support/app')
const { runCli } = require('../support/cli')
const { EXAMPLE, startExample } = require('../support/example')
const { waitFor } = require('../support/wait')

/**
 * The README's "Operations: from an alert to the fix", step by step, on the example app as its own process (SQLite
 * file or a PostgreSQL database), once over HTTP against the operator service and once with the CLI run in the
 * example's folder. Retries wait 8 s, then 24 s (as the README starts the example), so the reservations wait with a
 * last error for half a minute before the 3rd attempt makes them dead letters: steps 1 and 2 run in that window,
 * also when every CLI call takes seconds on a loaded machine (with 4 s and 12 s, step 2 found them dead in CI).
 */
const SLOW_RETRIES = { requires: { flights: { outboxed: { backoff: { base: '4s', factor: 3, max: '24s' } } } } }
const DLQ = '/odata/v4/event-queues'
const asOps = { auth: { username: 'ops', password: 'ops' } }
const json = { headers: { 'content-type': 'application/json' } }

let app, http
beforeAll(async () => {
  let db
  if (onPostgres()) {
    const postgres = require('../support/postgres')
    const database = postgres.newDatabaseName()
    await postgres.createDatabase(database)
    db = postgres.dbConfig(database)
  }
  app = await startExample(SLOW_RETRIES, db)
  http = app.http
}, 40000)
afterAll(() => app?.stop())

const statistics = async () => (await http.get(`${DLQ}/statistics()`, asOps)).data.value
const flightsRow = async () => (await statistics()).find(s => s.queue === 'flights')
const booking = async ID => (await http.get(`/odata/v4/travel/Bookings(${ID})`)).data
const cli = args => runCli(args, { cwd: EXAMPLE, env: { CDS_CONFIG: JSON.stringify(app.config) } })

/** Each step once per way an operator takes it. */
const OVER_HTTP = {
  async lagAlert() {
    return (await flightsRow()).relayLag > 2
  },
  async deadAlert() {
    return (await statistics()).reduce((sum, s) => sum + s.dead, 0) > 0
  },
  async waiting() {
    const res = await http.get(`${DLQ}/PendingOutboxMessages?$filter=target eq 'flights'&$select=ID,service,event,attempts,lastError&$orderby=waitingSince`, asOps)
    return res.data.value
  },
  async deadLetters() {
    const res = await http.get(`${DLQ}/DeadOutboxMessages?$filter=target eq 'flights'&$select=ID,service,event,attempts,lastError,msg&$orderby=timestamp`, asOps)
    return res.data.value
  },
  async reviveOne(ID) {
    expect((await http.post(`${DLQ}/DeadOutboxMessages(${ID})/EventQueuesService.revive`, {}, { ...json, ...asOps })).status).toBe(204)
  },
  async deleteOne(ID) {
    expect((await http.post(`${DLQ}/DeadOutboxMessages(${ID})/EventQueuesService.delete`, {}, { ...json, ...asOps })).status).toBe(204)
  },
  async reviveByFilter() {
    return (await http.post(`${DLQ}/reviveAll`, { queue: 'flights', event: 'reserveSeats' }, { ...json, ...asOps })).data.value
  },
  async allClear() {
    const row = await flightsRow()
    return !row || (row.dead === 0 && row.pending === 0)
  }
}

const WITH_CLI = {
  async lagAlert() {
    const res = await cli(['status', '--max-lag', '2s'])
    expect(res.stderr).toMatch(/^relay lag of flights \/ flights \/ reserveSeats is \d+s, over --max-lag 2s\n/)
    return res.code === 4
  },
  async deadAlert() {
    const res = await cli(['status', '--max-dead', '0'])
    expect(res.stderr).toMatch(/^\d+ dead letters?, over --max-dead 0\n$/)
    return res.code === 4
  },
  async waiting() {
    const res = await cli(['pending', '--queue', 'flights', '--json'])
    expect(res.code).toBe(0)
    return JSON.parse(res.stdout)
  },
  async deadLetters() {
    const res = await cli(['dead', '--queue', 'flights', '--json'])
    expect(res.code).toBe(0)
    return JSON.parse(res.stdout)
  },
  async reviveOne(ID) {
    expect(await cli(['revive', ID])).toMatchObject({ code: 0, stdout: 'Revived 1 dead letter.\n' })
  },
  async deleteOne(ID) {
    expect(await cli(['delete', ID])).toMatchObject({ code: 0, stdout: 'Deleted 1 dead letter.\n' })
  },
  async reviveByFilter() {
    const res = await cli(['revive', '--all', '--queue', 'flights', '--event', 'reserveSeats'])
    expect(res.code).toBe(0)
    return Number(/^Revived (\d+) dead letters?\.\n$/.exec(res.stdout)[1])
  },
  async allClear() {
    const res = await cli(['status', '--max-dead', '0', '--max-lag', '2s'])
    return res.code === 0
  }
}

describe.each([
  ['over HTTP', OVER_HTTP],
  ['with the CLI', WITH_CLI]
])('operations: from an alert to the fix, %s', (_, operator) => {
  const bookings = {}
  let deadByCustomer

  beforeAll(async () => {
    // The flights system goes down; bookings are still accepted, their reservations fail and are retried.
    await http.post('/odata/v4/flights/simulateOutage', { failing: true }, json)
    for (const [customer, flight] of [['Grace', 'LH454'], ['Linus', 'LH454'], ['Ada', 'LH400'], ['Alan', 'LH400']]) {
      const res = await http.post('/odata/v4/travel/Bookings', { flight, customer, seats: 1 }, json)
      expect(res.status).toBe(201)
      bookings[customer] = res.data.ID
    }
  })

  test('1. alert on relay lag: the oldest reservation has waited longer than the threshold', async () => {
    await waitFor(async () => (await flightsRow())?.relayLag >= 3, { timeout: 8000, what: 'three seconds of relay lag' })
    expect(await operator.lagAlert()).toBe(true)
  })

  test('2. its cause: the waiting reservations are failing, and their last error says why', async () => {
    const waiting = await operator.waiting()
    expect(waiting).toHaveLength(4)
    for (const m of waiting) {
      expect(m).toMatchObject({ service: 'flights', event: 'reserveSeats', lastError: expect.stringContaining('Flights service unavailable') })
      expect(m.attempts).toBeGreaterThanOrEqual(1)
    }
  })

  test('3. alert on dead-letter depth: after the last attempt they are dead letters', async () => {
    await waitFor(async () => (await flightsRow())?.dead === 4, { timeout: 60000, what: 'four dead letters' })
    expect(await operator.deadAlert()).toBe(true)
  }, 90000)

  test('4. the cause, per dead letter: service, event, last error and the booking in its message', async () => {
    const dead = await operator.deadLetters()
    expect(dead).toHaveLength(4)
    for (const d of dead) {
      expect(d).toMatchObject({ service: 'flights', event: 'reserveSeats', attempts: 3, lastError: expect.stringContaining('Flights service unavailable') })
    }
    deadByCustomer = Object.fromEntries(
      Object.entries(bookings).map(([customer, ID]) => [customer, dead.find(d => JSON.parse(d.msg).data.booking === ID).ID])
    )
    for (const ID of Object.values(bookings)) await waitFor(async () => (await booking(ID)).status === 'failed', { what: 'the #failed callback' })
  })

  test('5. fix the cause, then revive one dead letter first: it runs and its booking is confirmed', async () => {
    await http.post('/odata/v4/flights/simulateOutage', { failing: false }, json)
    await operator.reviveOne(deadByCustomer.Grace)
    await waitFor(async () => (await booking(bookings.Grace)).status === 'confirmed', { what: "Grace's booking to be confirmed" })
  })

  test('6. delete the dead letter that must not run any more (Linus cancelled): it is gone, his booking stays failed', async () => {
    await operator.deleteOne(deadByCustomer.Linus)
    const left = (await operator.deadLetters()).map(d => d.ID).sort()
    expect(left).toEqual([deadByCustomer.Ada, deadByCustomer.Alan].sort())
    expect((await booking(bookings.Linus)).status).toBe('failed')
  })

  test('7. revive the rest by filter: every reservation of the queue runs', async () => {
    expect(await operator.reviveByFilter()).toBe(2)
    for (const customer of ['Ada', 'Alan']) {
      await waitFor(async () => (await booking(bookings[customer])).status === 'confirmed', { what: `${customer}'s booking to be confirmed` })
    }
  })

  test('8. all clear: no dead letters and no lag on the queue', async () => {
    await waitFor(() => operator.allClear(), { timeout: 10000, interval: 250, what: 'the queue to be clear' })
    expect((await booking(bookings.Linus)).status).toBe('failed')
  })
})
