const { suiteRedis, haltServer, restartServer } = require('./support/redis')
const { brokerWaits } = require('../../lib/runner/broker-waits')
const { startApp } = require('../support/app')
const { runCli } = require('../support/cli')
const { waitFor } = require('../support/wait')
const { MESSAGES, messages } = require('../support/outbox')
const cds = require('@sap/cds')

const redis = suiteRedis()
const secured = suiteRedis({ password: 'secret' })
const GROUP = 'event-queues-test-app' // the app's package.json name

const app = startApp({
  requires: {
    // batches of 10: see test/broker/support/apps.js
    queue: { backoff: { base: 50, factor: 2, max: 500 }, batchSize: 10 },
    // as CAP's Redis is configured: credentials.uri, here without user and password
    streams: { kind: 'redis-streams', credentials: { uri: `redis://127.0.0.1:${redis.port}` }, format: 'cloudevents', claimAfter: '1s' },
    inboxStreams: { kind: 'redis-streams', credentials: { uri: `redis://127.0.0.1:${redis.port}` }, inboxed: true, group: 'inbox-app' },
    boundedStreams: { kind: 'redis-streams', credentials: { uri: `redis://127.0.0.1:${redis.port}` }, maxLength: 100 },
    // with a password: user and password in credentials.uri, a password only in credentials.url
    userStreams: { kind: 'redis-streams', credentials: { uri: `redis://default:secret@127.0.0.1:${secured.port}` } },
    passwordStreams: { kind: 'redis-streams', credentials: { url: `redis://:secret@127.0.0.1:${secured.port}` }, group: 'other-app' }
  },
  log: { levels: { 'redis-streams': 'error' } }
})

/** A client of the suite's Redis outside the app: what the broker holds. */
let client
beforeAll(async () => {
  client = require('redis').createClient({ url: redis.url })
  client.on('error', () => {})
  await client.connect()
})
afterAll(() => client?.destroy())

/** Subscribes `topic` on service `name`, recording what arrives. */
async function subscriber(name, topic) {
  const received = []
  const srv = await cds.connect.to(name)
  srv.on(topic, msg => received.push({ data: msg.data, headers: msg.headers }))
  return received
}

const pending = async (stream, group = GROUP) => Number((await client.sendCommand(['XPENDING', stream, group]))[0])

describe("kind 'redis-streams'", () => {
  afterEach(() => DELETE.from(MESSAGES))

  test('a committed emit reaches the subscriber through the stream, with its CloudEvents attributes; a rolled-back one never does', async () => {
    const received = await subscriber('streams', 'orders/created')
    const streams = await cds.connect.to('streams')
    await cds.tx(() => streams.emit('orders/created', { n: 1 })).catch(() => {})
    await cds.tx(async () => {
      await streams.emit('orders/created', { n: 2 })
      throw new Error('rolled back')
    }).catch(() => {})
    await cds.tx(() => streams.emit('orders/created', { n: 3 }))
    await waitFor(() => received.length >= 2, { what: 'two events at the subscriber' })
    expect(received.map(m => m.data)).toEqual([{ n: 1 }, { n: 3 }])
    expect(received[0].headers).toMatchObject({ specversion: '1.0', type: 'orders/created', id: expect.any(String) })
    // in the stream: the two committed events, each acknowledged by the app's group once its subscriber ran
    expect(Number(await client.sendCommand(['XLEN', 'orders/created']))).toBe(2)
    await waitFor(async () => (await pending('orders/created')) === 0, { what: 'both entries acknowledged' })
  })

  test('inboxed: the entry is acknowledged once its inbox row committed, and the subscriber runs from the inbox', async () => {
    const received = await subscriber('inboxStreams', 'payments/received')
    const inbox = await cds.connect.to('inboxStreams')
    await cds.tx(() => inbox.emit('payments/received', { amount: 7 }))
    await waitFor(() => received.length === 1, { what: 'the subscriber' })
    expect(received[0].data).toEqual({ amount: 7 })
    await waitFor(async () => (await pending('payments/received', 'inbox-app')) === 0, { what: 'the entry acknowledged' })
    await waitFor(async () => (await messages()).length === 0, { what: 'the inbox row processed' })
  })

  test('entries a dead consumer of the group received and never acknowledged are claimed after claimAfter and handled', async () => {
    const received = await subscriber('streams', 'orders/shipped')
    // the group exists once the app reads the stream
    await waitFor(async () => (await client.sendCommand(['XINFO', 'GROUPS', 'orders/shipped']).catch(() => [])).length > 0, { what: "the app's group" })
    // another instance of the app takes two entries and dies before acknowledging them (one transaction: the app's
    // blocked read is served after it, and finds nothing new)
    const entry = n => ['XADD', 'orders/shipped', '*', 'message', JSON.stringify({ data: { n } })]
    await client.multi().addCommand(entry(1)).addCommand(entry(2))
      .addCommand(['XREADGROUP', 'GROUP', GROUP, 'dead-instance', 'COUNT', '10', 'STREAMS', 'orders/shipped', '>']).exec()
    expect(await pending('orders/shipped')).toBe(2)
    await waitFor(() => received.length === 2, { what: 'the claimed entries at the subscriber' })
    expect(received.map(m => m.data)).toEqual([{ n: 1 }, { n: 2 }])
    await waitFor(async () => (await pending('orders/shipped')) === 0, { what: 'both acknowledged' })
  })

  test('each XADD bounds the stream to about maxLength entries', async () => {
    const bounded = await cds.connect.to('boundedStreams')
    for (let i = 0; i < 3; i++) await cds.tx(() => Promise.all(Array.from({ length: 100 }, (_, n) => bounded.emit('metrics/sampled', { n }))))
    await waitFor(async () => (await messages()).length === 0, { timeout: 120000, what: 'the relay of 300 events' })
    const length = Number(await client.sendCommand(['XLEN', 'metrics/sampled']))
    // approximate trimming removes whole nodes (100 entries each by default): some, never below the bound
    expect(length).toBeGreaterThanOrEqual(100)
    expect(length).toBeLessThan(300)
  })

  test('connects with user and password in credentials.uri, and with a password only in credentials.url', async () => {
    const byUser = await subscriber('userStreams', 'secured/user')
    const byPassword = await subscriber('passwordStreams', 'secured/user')
    await cds.tx(() => cds.connect.to('userStreams').then(srv => srv.emit('secured/user', { via: 'uri' })))
    await cds.tx(() => cds.connect.to('passwordStreams').then(srv => srv.emit('secured/user', { via: 'url' })))
    // two groups (apps) on one stream: each gets both events
    await waitFor(() => byUser.length === 2 && byPassword.length === 2, { what: 'both events in both groups' })
    expect(byUser.map(m => m.data.via).sort()).toEqual(['uri', 'url'])
  })

  test('invalid options fail at connect with an error naming the option, the value and what is allowed', async () => {
    const connect = options => cds.connect.to('badStreams', { kind: 'redis-streams', credentials: { uri: redis.url }, ...options })
    await expect(connect({ maxLength: 'lots' })).rejects.toThrow('Invalid cds.requires.badStreams.maxLength: "lots". Expected an integer >= 1.')
    await expect(connect({ maxLength: 10, maxAge: '1h' })).rejects.toThrow(/Invalid cds.requires.badStreams.maxAge: "1h". Expected no maxAge beside maxLength \(10\)/)
    await expect(connect({ claimAfter: 'soon' })).rejects.toThrow(/cds.requires.badStreams.claimAfter/)
    await expect(connect({ credentials: { uri: 'http://user:pw@host' } })).rejects.toThrow(
      `Invalid cds.requires.badStreams.credentials.uri: "http://***@host". Expected a Redis URL like 'redis://host:6379' or 'rediss://user:password@host:6380'.`
    )
  })

  test('while Redis is down, relays wait without an attempt charged; after it returns (empty: no persistence) the events arrive and the app stayed up', async () => {
    const received = await subscriber('streams', 'orders/cancelled')
    const streams = await cds.connect.to('streams')
    await haltServer(redis, 'SIGKILL')
    await cds.tx(() => streams.emit('orders/cancelled', { n: 1 }))
    const [wait] = await waitFor(() => brokerWaits.current.length && brokerWaits.current, { what: 'the relay to wait for the broker' })
    expect(wait).toMatchObject({ service: 'streams', reason: expect.stringMatching(/not connected to Redis/), suspected: false })
    // it waits in the table, charged nothing, and claims leave it there
    await waitFor(async () => (await messages())[0]?.status === null, { what: 'the event back in the table' })
    expect((await messages())[0]).toMatchObject({ attempts: 0, status: null, lastError: expect.stringMatching(/^Waiting for the broker since /) })
    // the wait is visible: health (this process), and the CLI (the table, for every instance)
    const health = await waitFor(async () => {
      const { checks } = await cds.queued.health()
      return checks.broker?.waiting[0]?.events === 1 && checks
    }, { what: 'the health check to count the waiting event' })
    expect(health.broker).toEqual({ status: 'UP', waiting: [{ service: 'streams', since: new Date(wait.since).toISOString(), events: 1, suspected: false }] })
    const status = await runCli(['status'])
    expect(status.stdout).toMatch(new RegExp(`streams .*waiting for the broker since ${new Date(wait.since).toISOString().slice(0, 19)}\\S*, 1 events`))
    await restartServer(redis)
    await waitFor(() => received.length === 1, { timeout: 30000, what: 'the event after Redis is back' })
    expect(received[0].data).toEqual({ n: 1 })
    expect((await cds.queued.health()).checks.broker).toBeUndefined()
    // the app still serves
    expect((await app.axios.get('/odata/v4/target/$metadata', { validateStatus: () => true })).status).toBe(200)
  })
})
