const http = require('http')
const { startApp, onPostgres } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES, messages, millis } = require('../support/outbox')
const cds = require('@sap/cds')

// The message ID on the wire (issue 23, item 1) and the sequence number per ordering key (item 6): what a consumer
// receives from a relayed message, on every attempt.
const fast = { backoff: { base: 10, max: 20 } }
const { POST } = startApp({
  requires: {
    queue: fast,
    // messaging services are queued by default; a subscriber of local-messaging runs in the relay's dispatch
    cloudEvents: { kind: 'local-messaging', format: 'cloudevents' },
    plainEvents: { kind: 'local-messaging' },
    keyedEvents: { kind: 'local-messaging', format: 'cloudevents', outboxed: { orderingKey: 'order', ...fast } },
    plainKeyed: { kind: 'local-messaging', outboxed: { orderingKey: 'order', ...fast } },
    // a remote service whose calls carry the message ID as Idempotency-Key; its URL is set in beforeAll
    Flights: { kind: 'rest', credentials: { url: 'http://127.0.0.1:1' }, outboxed: fast, idempotencyKey: true },
    Hotels: { kind: 'rest', credentials: { url: 'http://127.0.0.1:1' }, outboxed: fast, idempotencyKey: 'X-Request-ID' },
    Cars: { kind: 'rest', credentials: { url: 'http://127.0.0.1:1' }, outboxed: fast }
  }
})

/** A local HTTP server standing in for a remote system: records each request, fails the first `failures` with 503. */
function remoteSystem() {
  const requests = []
  let failures = 0
  const server = http.createServer((req, res) => {
    let body = ''
    req.on('data', chunk => (body += chunk))
    req.on('end', () => {
      requests.push({ url: req.url, headers: req.headers, body })
      if (failures > 0) {
        failures--
        res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":{"message":"busy"}}')
      } else res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}')
    })
  })
  return {
    requests,
    failNext: n => (failures = n),
    start: () => new Promise(resolve => server.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${server.address().port}`))),
    stop: () => new Promise(resolve => server.close(resolve))
  }
}

describe('the consumer half: stable IDs and sequence numbers on the wire', () => {
  const remote = remoteSystem()
  beforeAll(async () => {
    const url = await remote.start()
    for (const name of ['Flights', 'Hotels', 'Cars']) cds.env.requires[name].credentials.url = url
  })
  afterAll(() => remote.stop())
  afterEach(async () => {
    await cds.flush()
    await DELETE.from(MESSAGES)
  })

  /** Subscribes to `event` of `service`, failing the first `failures` attempts; resolves the received messages. */
  async function subscriber(service, event, failures = 0) {
    const srv = await cds.connect.to(service)
    const received = []
    srv.on(event, msg => {
      received.push({ headers: { ...msg.headers }, queue: msg.queue && { messageId: msg.queue.messageId, sequence: msg.queue.sequence } })
      if (received.length <= failures) throw new Error('subscriber not ready')
    })
    return received
  }

  test('a relayed CloudEvents message carries the queue message ID as its id on every attempt, and its enqueue time as time', async () => {
    const received = await subscriber('cloudEvents', 'orderPaid', 2)
    const srv = await cds.connect.to('cloudEvents')
    const before = Date.now()
    await cds.tx(() => srv.emit('orderPaid', { order: 'o1' }))
    const [row] = await messages()
    await waitFor(() => received.length === 3, { what: 'three attempts' })
    const ids = received.map(r => r.headers.id)
    expect(new Set(ids)).toEqual(new Set([row.ID]))
    expect(received.map(r => r.queue.messageId)).toEqual([row.ID, row.ID, row.ID])
    // the time it was enqueued, not of the attempt
    for (const { headers } of received) expect(Date.parse(headers.time)).toBe(millis(row.timestamp))
    expect(Date.parse(received[0].headers.time)).toBeGreaterThanOrEqual(before)
  })

  test("its source names the app (its package.json), not the process: source + id, what identifies a CloudEvent, are the same from every instance", async () => {
    const received = await subscriber('cloudEvents', 'orderShipped')
    const srv = await cds.connect.to('cloudEvents')
    await cds.tx(() => srv.emit('orderShipped', {}))
    await cds.tx(() => srv.emit('orderShipped', {}, { source: '/my/orders' }))
    await waitFor(() => received.length === 2, { what: 'two messages' })
    expect(received.map(r => r.headers.source)).toEqual(['/default/sap.cap/event-queues-test-app', '/my/orders'])
  })

  test("an application's own id and time are kept", async () => {
    const received = await subscriber('cloudEvents', 'ownId')
    const srv = await cds.connect.to('cloudEvents')
    await cds.tx(() => srv.emit('ownId', {}, { id: 'my-id', time: '2020-01-01T00:00:00.000Z' }))
    await waitFor(() => received.length === 1, { what: 'the subscriber' })
    expect(received[0].headers).toMatchObject({ id: 'my-id', time: '2020-01-01T00:00:00.000Z' })
  })

  test('other formats carry the message ID as the header x-message-id', async () => {
    const received = await subscriber('plainEvents', 'shipped', 1)
    const srv = await cds.connect.to('plainEvents')
    await cds.tx(() => srv.emit('shipped', {}))
    const [row] = await messages()
    await waitFor(() => received.length === 2, { what: 'two attempts' })
    expect(received.map(r => r.headers['x-message-id'])).toEqual([row.ID, row.ID])
    expect(received[0].headers).not.toHaveProperty('id')
  })

  test('a recurring task publishes each occurrence under an ID of its own, the same on each attempt of it', async () => {
    const received = await subscriber('plainEvents', 'heartbeat', 1)
    const srv = await cds.connect.to('plainEvents')
    await srv.schedule('heartbeat').every('50ms')
    await waitFor(() => received.length >= 4, { what: 'two occurrences (the first one failed once)' })
    await srv.unschedule('heartbeat')
    const [failed, retried, second] = received.map(r => r.headers['x-message-id'])
    expect(retried).toBe(failed)
    expect(second).not.toBe(failed)
    expect(received[0].queue.messageId).toBe(received[2].queue.messageId) // one row, one messageId
  })

  describe('sequence numbers per ordering key', () => {
    test('keyed messages are numbered per key from 1, without gaps, in req.queue.sequence and on the wire', async () => {
      const received = await subscriber('keyedEvents', 'changed')
      const srv = await cds.connect.to('keyedEvents')
      await cds.tx(async () => {
        for (const order of ['a', 'b', 'a', 'a', 'b']) await srv.emit('changed', { order })
      })
      await waitFor(() => received.length === 5, { what: 'five messages' })
      const of = key => received.filter(r => r.headers.partitionkey === key)
      expect(of('a').map(r => r.queue.sequence)).toEqual([1, 2, 3])
      expect(of('b').map(r => r.queue.sequence)).toEqual([1, 2])
      // CloudEvents' sequence extension: a string that orders lexicographically
      expect(of('a').map(r => r.headers.sequence)).toEqual(['0000000000000001', '0000000000000002', '0000000000000003'])
    })

    test('a rolled-back transaction uses no number, and numbers go on across transactions', async () => {
      const received = await subscriber('plainKeyed', 'moved')
      const srv = await cds.connect.to('plainKeyed')
      await cds.tx(() => srv.emit('moved', { order: 'r' }))
      await cds.tx(async () => {
        await srv.emit('moved', { order: 'r' })
        throw Object.assign(new Error('rolled back'), { rollback: true })
      }).catch(e => {
        if (!e.rollback) throw e
      })
      await cds.tx(() => srv.emit('moved', { order: 'r' }, { 'x-ordering-key': 'r' }))
      await waitFor(() => received.length === 2, { what: 'two messages' })
      expect(received.map(r => r.headers['x-ordering-sequence'])).toEqual([1, 2])
      expect(received.map(r => r.queue.sequence)).toEqual([1, 2])
    })

    test("two transfers in opposite directions at the same time, each queueing a message of both accounts, both commit: the numbers take no lock of the app's transaction", async () => {
      const received = await subscriber('keyedEvents', 'transferred')
      const ledger = await cds.connect.to('keyedEvents')
      // On PostgreSQL two transactions write side by side: each queues its first message before either queues its
      // second (on SQLite the second transaction's first write waits for the first one's commit).
      const firstQueued = arrivals(onPostgres() ? 2 : 1)
      ;(await cds.connect.to('Target')).on('act', async req => {
        const [from, to] = req.data.value.split('>')
        await ledger.emit('transferred', { order: from, amount: -10 })
        await firstQueued.arrive()
        await ledger.emit('transferred', { order: to, amount: 10 })
        return 'booked'
      })
      const transfer = value => POST('/odata/v4/target/act', { value }, { validateStatus: () => true })
      const answers = await Promise.all([transfer('A>B'), transfer('B>A')])
      expect(answers.map(a => [a.status, a.data.error?.message ?? a.data.value])).toEqual([[200, 'booked'], [200, 'booked']])
      await waitFor(() => received.length === 4, { what: 'four messages' })
      const of = key => received.filter(r => r.headers.partitionkey === key).map(r => r.queue.sequence)
      expect([of('A'), of('B')]).toEqual([[1, 2], [1, 2]])
    })

    test("a message keeps its number on every retry and when revived; a dead letter's number is a gap the next message shows", async () => {
      const srv = await cds.connect.to('plainKeyed')
      const received = []
      let rejecting = true
      srv.on('numbered', msg => {
        const { n } = msg.data
        received.push([n, msg.queue.sequence, msg.headers['x-ordering-sequence']])
        if (n === 1 && rejecting) throw Object.assign(new Error('rejected'), { unrecoverable: true })
        if (n === 2 && received.filter(r => r[0] === 2).length === 1) throw new Error('not yet')
      })
      for (const n of [1, 2, 3]) await cds.tx(() => srv.emit('numbered', { order: 'g', n }))
      await waitFor(() => received.some(r => r[0] === 3), { what: 'the third message' })
      rejecting = false
      const operations = await cds.connect.to('EventQueuesService')
      await operations.tx({ user: new cds.User.Privileged() }, tx => tx.send('reviveAll', { service: 'plainKeyed' }))
      await waitFor(() => received.length === 5, { what: 'the revived message' })
      expect(received).toEqual([[1, 1, 1], [2, 2, 2], [2, 2, 2], [3, 3, 3], [1, 1, 1]])
    })

    test('unkeyed messages carry no sequence number', async () => {
      const received = await subscriber('plainEvents', 'loose')
      await cds.tx(async () => (await cds.connect.to('plainEvents')).emit('loose', {}))
      await waitFor(() => received.length === 1, { what: 'the subscriber' })
      expect(received[0].headers).not.toHaveProperty('x-ordering-sequence')
      expect(received[0].queue.sequence).toBeUndefined()
    })
  })

  describe('Idempotency-Key on calls of queued remote services', () => {
    test('a queued remote call carries the message ID as Idempotency-Key, the same on each retry', async () => {
      remote.requests.length = 0
      remote.failNext(2)
      const flights = await cds.connect.to('Flights')
      await cds.tx(() => flights.send({ method: 'POST', path: '/bookings', data: { seats: 2 } }))
      const [row] = await messages()
      await waitFor(async () => (await messages()).length === 0, { what: 'the call to succeed after two 503s' })
      expect(remote.requests).toHaveLength(3)
      // a Structured Field string, as the IETF draft defines the header
      expect(remote.requests.map(r => r.headers['idempotency-key'])).toEqual(Array(3).fill(`"${row.ID}"`))
    })

    test('the header name is configurable; a key the application set is kept; services without the option send none', async () => {
      remote.requests.length = 0
      const hotels = await cds.connect.to('Hotels')
      const cars = await cds.connect.to('Cars')
      await cds.tx(async () => {
        await hotels.send({ method: 'POST', path: '/rooms', data: {} })
        await hotels.send({ method: 'POST', path: '/suites', data: {}, headers: { 'X-Request-ID': 'mine' } })
        await cars.send({ method: 'POST', path: '/cars', data: {} })
      })
      await waitFor(() => remote.requests.length === 3, { what: 'three calls' })
      const by = path => remote.requests.find(r => r.url === path).headers
      expect(by('/rooms')['x-request-id']).toMatch(/^"[0-9a-f-]{36}"$/)
      expect(by('/rooms')).not.toHaveProperty('idempotency-key')
      expect(by('/suites')['x-request-id']).toBe('mine')
      expect(by('/cars')).not.toHaveProperty('idempotency-key')
    })
  })
})

/** Resolves each `arrive()` once `count` callers have arrived. */
function arrivals(count) {
  let arrived = 0
  let all
  const together = new Promise(resolve => (all = resolve))
  return {
    arrive: () => {
      if (++arrived >= count) all()
      return together
    }
  }
}
