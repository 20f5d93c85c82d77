const { startServer, stopServer } = require('./support/redis')
const apps = require('./support/apps')
const { waitFor } = require('../support/wait')

/**
 * A graceful shutdown lets the relays that run finish within `shutdownGrace`, as it lets any handler finish, and
 * hands back what did not start, without counting an attempt: the broker's connection must outlive the relays. A
 * producer CAP app is stopped (SIGTERM) while it relays 2,000 committed events to Redis: no event is charged an
 * attempt, and each is at Redis or still in the queue table.
 */
describe('a graceful shutdown during the relay', () => {
  let redis, client, database, producer

  beforeAll(async () => {
    redis = await startServer({ password: 'secret' })
    client = require('redis').createClient({ url: redis.url })
    client.on('error', () => {})
    await client.connect()
    database = await apps.newDatabase()
    producer = await apps.startProducer(database, redis, { deploy: true, env: { CDS_LOG_LEVELS_QUEUE: 'info' } })
  })

  afterAll(async () => {
    await apps.stopInstance(producer)
    client?.destroy()
    if (redis) await stopServer(redis)
  })

  test('relays in flight at SIGTERM are not charged an attempt, and no committed event is lost', async () => {
    await apps.placeOrders(producer, { from: 0, count: 2000, perTx: 100, rollbackEvery: 1000 })
    const relayed = () => client.sendCommand(['XLEN', 'orders/created']).then(Number)
    await waitFor(async () => (await relayed()) >= 200, { timeout: 120000, interval: 5, what: '200 events relayed' })
    await apps.stopInstance(producer, 30000)
    const left = await apps.query(database, 'SELECT attempts, lastError FROM cds_outbox_Messages')
    const charged = left.filter(r => Number(r.attempts) > 0)
    expect({ charged: charged.length, first: charged[0]?.lastError?.split('\n')[0] }).toEqual({ charged: 0, first: undefined })
    expect(producer.output).not.toMatch(/failed \(attempt \d+\)/)
    // the broker was never away: the relays that ran were not cut off by their own connection closing
    expect(left.filter(r => /^Waiting for the broker/.test(r.lastError ?? '')).length).toBe(0)
    expect(producer.output).not.toMatch(/waiting for the broker|ClientClosedError|Disconnects client/i)
    // the shutdown also ends the orders being placed: what counts is what committed
    const committed = (await apps.records(database, 'order')).length
    const atRedis = new Set((await client.sendCommand(['XRANGE', 'orders/created', '-', '+'])).map(([, fields]) => JSON.parse(fields[1]).data.n))
    expect(atRedis.size + left.length).toBeGreaterThanOrEqual(committed)
  })
})
