const { startServer, stopServer } = require('./support/redis')
const apps = require('./support/apps')
const { waitFor } = require('../support/wait')

/**
 * Memory stays bounded for a backlog of large entries (issue 31, defect 5): the consumer app (inboxed) in a process
 * with the heap of a small container (`--max-old-space-size=256`) starts beside 100 entries of 3.9 MB each (390 MB,
 * each below the default maxMessageSize of 4 MiB) in its stream. One read of 100 entries held them all at once, and
 * the consumer died on every start; reads are bounded in bytes now (maxClaimBytes / maxMessageSize entries).
 */
const HEAP = '--max-old-space-size=256'
const ENTRIES = 100
const PAYLOAD = 3.9 * 1000 * 1000

describe('redis-streams: memory with a backlog of large entries', () => {
  let redis, redisClient, consumer

  afterEach(async () => {
    await apps.stopInstance(consumer)
    redisClient?.destroy()
    if (redis) await stopServer(redis)
  })

  test('a consumer with a 256 MB heap handles 100 entries of 3.9 MB each', async () => {
    redis = await startServer({ persistence: false })
    redisClient = require('redis').createClient({ url: redis.url })
    redisClient.on('error', () => {})
    await redisClient.connect()
    const text = 'x'.repeat(PAYLOAD)
    for (let n = 0; n < ENTRIES; n++) {
      await redisClient.sendCommand(['XADD', 'orders/created', '*', 'message', JSON.stringify({ data: { n, text }, id: `large-${n}` })])
    }
    const database = await apps.newDatabase()
    consumer = await apps.startConsumer(database, redis, { deploy: true, execArgv: [HEAP] })
    let died
    consumer.once('exit', (code, signal) => (died = `the consumer exited (${code ?? signal}):\n${consumer.output.slice(-3000)}`))
    await waitFor(async () => {
      if (died) throw new Error(died)
      return (await apps.records(database, 'received')).length >= ENTRIES
    }, { timeout: 15 * 60 * 1000, interval: 1000, what: `${ENTRIES} large entries handled` })
    expect(new Set((await apps.records(database, 'received')).map(r => r.n)).size).toBe(ENTRIES)
  })
})
