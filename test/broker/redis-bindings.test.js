const { suiteRedis } = require('./support/redis')
const { btpBinding } = require('./support/bindings')
const { startApp } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES } = require('../support/outbox')
const cds = require('@sap/cds')

/**
 * `redis-streams` with the credentials of a SAP BTP `redis-cache` binding, as CAP's `redis-messaging` reads them: a
 * Redis that requires a password, `credentials.uri` with BTP's placeholder user name. TLS (`rediss://`) with two apps:
 * redis-tls.test.js.
 */

const secured = suiteRedis({ password: 'secret' })
const WRONG = 'not-the-password-4711'

// Everything logged on redis-streams (the app's output): the wrong password's error lines.
const logged = []
for (const level of ['error', 'warn', 'info', 'debug']) {
  jest.spyOn(console, level).mockImplementation((...args) => void logged.push(args.map(String).join(' ')))
}
afterAll(() => jest.restoreAllMocks())

startApp({
  requires: {
    queue: { backoff: { base: 50, factor: 2, max: 500 } },
    btpStreams: { kind: 'redis-streams', credentials: btpBinding(secured), format: 'cloudevents' },
    wrongPassword: { kind: 'redis-streams', credentials: btpBinding(secured, { password: WRONG }) }
  },
  log: { levels: { 'redis-streams': 'debug' } }
})

const linesOf = service => logged.filter(line => line.includes(`${service} (Redis`))

describe("kind 'redis-streams' with a BTP redis-cache binding", () => {
  afterEach(() => DELETE.from(MESSAGES))

  test("credentials.uri with BTP's placeholder user name: the user name is ignored, as CAP's redis-messaging does; events relay and arrive", async () => {
    const srv = await cds.connect.to('btpStreams')
    const received = []
    srv.on('orders/created', msg => received.push(msg.data))
    await cds.tx(() => srv.emit('orders/created', { n: 1 }))
    await waitFor(() => received.length === 1, { what: 'the event at the subscriber' })
    expect(received).toEqual([{ n: 1 }])
  })

  test('a wrong password is one error naming the service and the host, never the password, not repeated within a minute', async () => {
    await cds.connect.to('wrongPassword')
    // several attempts to connect (the link retries with backoff, 0.1 s doubling)
    await waitFor(() => linesOf('wrongPassword').filter(line => /attempt \d+ failed/.test(line)).length >= 3, { what: 'three more failed attempts' })
    const errors = linesOf('wrongPassword').filter(line => /refused/.test(line))
    // one line, from whichever of the service's two connections (publisher, consumer) was refused first
    expect(errors).toEqual([expect.stringMatching(new RegExp(`^\\[redis-streams\\] - wrongPassword \\(Redis 127\\.0\\.0\\.1:${secured.port}(, consumer)?\\): ` +
      "Redis refused the credentials \\(WRONGPASS\\): check the password in the service's credentials \\(its binding\\); retrying with backoff, " +
      'this error repeats at most once a minute$'))])
    expect(logged.filter(line => line.includes(WRONG))).toEqual([])
  })

  test('cluster_mode: true fails at connect with an error saying a Redis cluster is not supported', async () => {
    const connect = credentials => cds.connect.to('clusterStreams', { kind: 'redis-streams', credentials })
    await expect(connect(btpBinding(secured, { cluster_mode: true }))).rejects.toThrow(
      'Invalid cds.requires.clusterStreams.credentials.cluster_mode: true. Expected false: redis-streams connects to one Redis node and ' +
        'reads all streams of a service in one XREADGROUP, which a cluster refuses across hash slots; bind a redis-cache instance without cluster mode.'
    )
  })
})
