const { startServer, haltServer, restartServer, stopServer } = require('./support/redis')
const apps = require('./support/apps')
const { waitFor, sleep } = require('../support/wait')

/**
 * A broker that is away is not a failure of the message (issue 32, item 1; issue 31, defect 6): a producer CAP app
 * whose business transactions emit on redis-streams (`format: 'cloudevents'`, queued by default) and a consumer app
 * subscribed with `inboxed: true`, Redis with a password as on SAP BTP. While Redis is stopped or frozen, the relay's
 * events wait without spending attempts, the app's other queued work goes on, and after Redis is back every event
 * arrives, none a dead letter. Figures in docs/BROKERS.md.
 */

// A test's fast curve: 10 attempts span about 2 s, less than the outage; waiting must not depend on the curve.
const QUEUE = { backoff: { base: 10, max: 500 }, maxAttempts: 10 }
// 300 events in 34 requests (33 of 9 and one of 3), none rolled back; the first two before the outage
const PER_TX = 9
const FIRST = 2 * PER_TX
const ROLLBACK_NONE = 1000

describe('a broker outage costs no attempt: producer app → Redis (stopped, frozen) → consumer app (inboxed)', () => {
  let redis, redisClient, producerDb, consumerDb, producer
  const running = new Set()
  const start = async starting => {
    const child = await starting
    running.add(child)
    return child
  }

  beforeEach(async () => {
    redis = await startServer({ persistence: true, password: 'secret' })
    redisClient = require('redis').createClient({ url: redis.url })
    redisClient.on('error', () => {})
    await redisClient.connect()
    ;[producerDb, consumerDb] = await Promise.all([apps.newDatabase(), apps.newDatabase()])
    await start(apps.startConsumer(consumerDb, redis, { deploy: true, queue: QUEUE }))
    // the queue's log, which the test app keeps silent: its lines about the outage are asserted
    producer = await start(apps.startProducer(producerDb, redis, { deploy: true, queue: QUEUE, env: { CDS_LOG_LEVELS_QUEUE: 'info' } }))
  })

  afterEach(async () => {
    // a frozen Redis must go on before it can be stopped
    if (redis?.pid) process.kill(redis.pid, 'SIGCONT')
    await Promise.all([...running].map(child => apps.stopInstance(child)))
    running.clear()
    redisClient?.destroy()
    if (redis) await stopServer(redis)
  })

  /**
   * Waits until every committed order reached the consumer or is a dead letter in the producer's queue (nothing else
   * can happen to it any more); resolves with both counts.
   */
  async function relayEnded(committed) {
    let last
    await waitFor(async () => {
      const received = new Set((await apps.records(consumerDb, 'received')).map(r => r.n)).size
      const dead = await apps.deadLetters(producerDb, QUEUE.maxAttempts)
      last = { received, dead }
      return received + dead >= committed && last
    }, { timeout: 300000, interval: 250, what: 'every committed event received or a dead letter' }).catch(e => {
      e.message += `; last seen: ${JSON.stringify(last)}`
      throw e
    })
    return last
  }

  test('Redis stopped for 3 s after the 10th event: no event is charged an attempt or becomes a dead letter, all 300 arrive', async () => {
    // The first two transactions' 18 events, then Redis stops and the other 282 are committed while it is away: the
    // relay has outrun the producer before (one CI run relayed all 300 before the stop, so no event waited).
    await apps.placeOrders(producer, { from: 0, count: FIRST, perTx: PER_TX, rollbackEvery: ROLLBACK_NONE })
    const before = await apps.ordersPlaced(producer)
    await waitFor(async () => Number(await redisClient.sendCommand(['XLEN', 'orders/created'])) >= 10, { timeout: 120000, interval: 5, what: '10 events relayed' })
    await haltServer(redis)
    const stoppedAt = Date.now()
    await apps.placeOrders(producer, { from: FIRST, count: 300 - FIRST, perTx: PER_TX, rollbackEvery: ROLLBACK_NONE })
    await sleep(3000)
    await restartServer(redis)
    const restartedAt = Date.now()
    const committed = before + (await apps.ordersPlaced(producer))
    const { received, dead } = await relayEnded(committed)
    const receivedAt = Date.now()
    expect(committed).toBe(300)
    expect(dead).toBe(0)
    expect(received).toBe(300)
    const relay = await apps.relayStats(producer)
    // no relay attempt failed: each event waited, none was charged
    expect(relay.retry ?? 0).toBe(0)
    // one warning when the outage began, one line when it ended, none per message
    const log = producer.output
    expect(log.split('\n').filter(line => /waiting for the broker|the broker is back/.test(line))).toEqual([expect.stringMatching(/waiting for the broker/), expect.stringMatching(/the broker is back/)])
    expect(log).toMatch(/the broker is back after .*; \d+ events waited/)
    expect(log).not.toMatch(/failed \(attempt/)
    console.log('redis stopped 3 s:', JSON.stringify({ committed, received, dead, relay, outageMs: restartedAt - stoppedAt, allReceivedAfterRestartMs: receivedAt - restartedAt }))
  })

  test('Redis frozen (SIGSTOP) while relays run: an unrelated queued service of the app goes on; after SIGCONT every event arrives', async () => {
    await apps.placeOrders(producer, { from: 0, count: 300, perTx: PER_TX, rollbackEvery: ROLLBACK_NONE })
    await waitFor(async () => Number(await redisClient.sendCommand(['XLEN', 'orders/created'])) >= 30, { timeout: 120000, interval: 10, what: '30 events relayed' })
    process.kill(redis.pid, 'SIGSTOP')
    const frozenAt = Date.now()
    const committed = await apps.ordersPlaced(producer)
    await apps.callLocalService(producer, 5)
    // the local service's calls run while Redis stays frozen
    await waitFor(async () => (await apps.records(producerDb, 'local')).length === 5, { timeout: 120000, interval: 100, what: '5 calls of the local service while Redis is frozen' })
    const localDoneMs = Date.now() - frozenAt
    process.kill(redis.pid, 'SIGCONT')
    const resumedAt = Date.now()
    const { received, dead } = await relayEnded(committed)
    expect(committed).toBe(300)
    expect(dead).toBe(0)
    expect(received).toBe(300)
    const relay = await apps.relayStats(producer)
    expect(relay.retry ?? 0).toBe(0)
    console.log('redis frozen:', JSON.stringify({ committed, received, dead, relay, localCallsDoneAfterFreezeMs: localDoneMs, allReceivedAfterResumeMs: Date.now() - resumedAt }))
  })
})
