const { startServer, stopServer } = require('./support/redis')
const { btpBinding, vcapServices } = require('./support/bindings')
const apps = require('./support/apps')

/**
 * Two CAP apps bound as on SAP BTP: each gets a `redis-cache` binding in VCAP_SERVICES (`rediss://` with the
 * placeholder user name and the password, `tls: true`) and configures only `kind: 'redis-streams'`; Redis requires
 * the password and serves TLS with a certificate the test makes, which the apps trust through NODE_EXTRA_CA_CERTS
 * (as an app trusts a private CA).
 */

const ORDERS = { count: 240, perTx: 10, rollbackEvery: 6 } // 24 transactions, every 6th rolled back: 200 committed

describe('a BTP redis-cache binding over TLS: producer app → Redis (rediss://) → consumer app (inboxed)', () => {
  let redis, redisClient
  const running = []

  beforeAll(async () => {
    redis = await startServer({ password: 'secret', tls: true })
    // the test's own client, on the plain port
    redisClient = require('redis').createClient({ url: `redis://:secret@127.0.0.1:${redis.port}` })
    redisClient.on('error', () => {})
    await redisClient.connect()
  })

  afterAll(async () => {
    await Promise.all(running.map(child => apps.stopInstance(child)))
    redisClient?.destroy()
    if (redis) await stopServer(redis)
  })

  test('every committed event reaches the consumer once, none rolled back, and every connection of the apps is on the TLS port', async () => {
    const bound = { VCAP_SERVICES: vcapServices(btpBinding(redis, { tls: true })), NODE_EXTRA_CA_CERTS: redis.tls.cert }
    const [producerDb, consumerDb] = await Promise.all([apps.newDatabase(), apps.newDatabase()])
    running.push(await apps.startConsumer(consumerDb, undefined, { deploy: true, env: bound }))
    const producer = await apps.startProducer(producerDb, undefined, { deploy: true, env: bound })
    running.push(producer)
    await apps.placeOrders(producer, ORDERS)
    expect(await apps.ordersPlaced(producer)).toBe(200)
    await apps.settled({ producerDb, consumerDb, redisClient, producer })
    const committed = (await apps.records(producerDb, 'order')).map(r => r.n).sort((a, b) => a - b)
    const received = (await apps.records(consumerDb, 'received')).map(r => r.n).sort((a, b) => a - b)
    expect(committed).toHaveLength(200)
    expect(received).toEqual(committed)
    // Redis's list of its clients: each app's publisher and consumer connections, all through TLS, beside the test's own
    const clients = String(await redisClient.sendCommand(['CLIENT', 'LIST'])).trim().split('\n')
    const ports = clients.map(line => Number(line.match(/ laddr=[^ ]+:(\d+) /)[1]))
    expect(ports.filter(port => port === redis.tlsPort).length).toBeGreaterThanOrEqual(4)
    expect(ports.filter(port => port === redis.port)).toHaveLength(1)
  })
})
