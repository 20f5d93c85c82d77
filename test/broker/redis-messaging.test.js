const { suiteRedis, haltServer, restartServer } = require('./support/redis')
const { brokerWaits } = require('../../lib/runner/broker-waits')
const { startApp } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES, messages } = require('../support/outbox')
const cds = require('@sap/cds')

// CAP's own Redis adapter (pub/sub) with the plugin's queue. A password, as on SAP BTP: CAP's adapter rewrites a
// credentials.uri without user and password into one without its host (see README, CAP's redis-messaging).
const redis = suiteRedis({ password: 'secret' })
startApp({
  requires: {
    // one slot: a transaction's first event is relayed alone (claimed at enqueue), the rest in batches of up to 50
    queue: { backoff: { base: 50, factor: 2, max: 500 }, concurrency: 1, batchSize: 50 },
    messaging: { kind: 'redis-messaging', credentials: { uri: `redis://default:secret@127.0.0.1:${redis.port}` } }
  },
  log: { levels: { 'redis-messaging': 'silent' } }
})
// CAP's adapter does not close its client on shutdown: it would keep reconnecting after the suite (test only)
afterAll(async () => cds.unqueued(await cds.connect.to('messaging')).client.destroy())

describe("CAP's redis-messaging with the plugin", () => {
  afterEach(() => DELETE.from(MESSAGES))

  test("a transaction's events are published in a few round trips to Redis, not one each, each once under its message ID", async () => {
    const client = require('redis').createClient({ url: redis.url })
    const subscriber = client.duplicate()
    await Promise.all([client.connect(), subscriber.connect()])
    try {
      const received = []
      await subscriber.subscribe('relay/batched', message => received.push(JSON.parse(message)))
      // read events the server processed: a pipeline of commands written at once is read in one (or a few)
      const reads = async () => Number(/total_reads_processed:(\d+)/.exec(await client.sendCommand(['INFO', 'stats']))[1])
      const messaging = await cds.connect.to('messaging')
      const before = await reads()
      await cds.tx(async () => {
        for (let n = 0; n < 120; n++) await messaging.emit('relay/batched', { n })
      })
      await waitFor(async () => received.length === 120 && (await messages()).length === 0, { timeout: 60000, what: 'the relay of 120 events' })
      const roundTrips = (await reads()) - before - 1
      expect(received.map(m => m.data.n).sort((a, b) => a - b)).toEqual(Array.from({ length: 120 }, (_, n) => n))
      expect(new Set(received.map(m => m['x-message-id'])).size).toBe(120)
      expect(roundTrips).toBeLessThan(20)
    } finally {
      await Promise.all([subscriber.quit(), client.quit()])
    }
  })

  test('a relay while Redis is down waits without an attempt charged until Redis is back, then published', async () => {
    const messaging = await cds.connect.to('messaging')
    const adapter = cds.unqueued(messaging)
    await haltServer(redis, 'SIGKILL')
    // (test only) the adapter's client has noticed that the connection is gone
    await waitFor(() => !adapter.client.isReady, { what: "the adapter's client to notice the outage" })

    await cds.tx(() => messaging.emit('orders/created', { n: 1 }))
    // CAP's adapter says 'Redis connection not ready' (lib/cap/broker-connections.ts): the relay waits for its client
    const [wait] = await waitFor(() => brokerWaits.current.length && brokerWaits.current, { what: 'the relay to wait for the broker' })
    expect(wait).toMatchObject({ service: 'messaging', reason: expect.stringMatching(/Redis connection not ready/), suspected: false })
    await waitFor(async () => (await messages())[0]?.status === null, { what: 'the event back in the table' })
    expect((await messages())[0]).toMatchObject({ attempts: 0, status: null })

    // Published once Redis is back (pub/sub: a subscriber connected at that moment gets it, see README)
    await restartServer(redis)
    await waitFor(async () => (await messages()).length === 0, { timeout: 30000, what: 'the relay after Redis is back' })
  })
})
