const { startServer, stopServer } = require('./support/redis')
const apps = require('./support/apps')
const { startInstance } = require('../support/instances')
const { waitFor, sleep } = require('../support/wait')

/**
 * A consumer whose entries another consumer of its group claimed while it did not answer (issue 31, defect 1): the
 * consumer app (not inboxed, a subscriber of 0.3 s, claimAfter 1 s) is paused (SIGSTOP) in the middle of a read's
 * batch for longer than claimAfter, another consumer (the test's client) claims what it left unacknowledged and
 * handles it; once resumed (SIGCONT), the paused consumer must not handle those entries again. Only the entry whose
 * subscriber was running when it was paused may be handled by both.
 */
const GROUP = 'event-queues-test-app'

describe('redis-streams: an entry claimed away is not handled by both', () => {
  let redis, client, consumer

  afterEach(async () => {
    if (consumer?.exitCode === null && consumer.signalCode === null) process.kill(consumer.pid, 'SIGCONT')
    await apps.stopInstance(consumer)
    client?.destroy()
    if (redis) await stopServer(redis)
  })

  test('a consumer paused for longer than claimAfter leaves the entries another consumer claimed meanwhile to it', async () => {
    redis = await startServer({ persistence: false })
    client = require('redis').createClient({ url: redis.url })
    client.on('error', () => {})
    await client.connect()
    const database = await apps.newDatabase()
    consumer = await startInstance(database, {
      name: 'consumer', script: '../broker/support/consumer.js', deploy: true, queue: apps.QUEUE,
      requires: apps.brokerConfig(redis, { claimAfter: '1s' }), env: { HANDLE_MS: '300' }
    })
    const received = async () => (await apps.records(database, 'received')).map(r => r.n)
    await waitFor(async () => (await client.sendCommand(['XINFO', 'GROUPS', 'orders/created']).catch(() => [])).length > 0, { what: "the consumer's group" })
    const publish = client.multi()
    for (let n = 1; n <= 8; n++) publish.addCommand(['XADD', 'orders/created', '*', 'message', JSON.stringify({ data: { n } })])
    const ids = await publish.exec()
    const nOf = new Map(ids.map((id, i) => [String(id), i + 1]))

    await waitFor(async () => (await received()).length >= 2, { what: 'two entries handled' })
    process.kill(consumer.pid, 'SIGSTOP')
    await sleep(1500) // the pause: longer than claimAfter
    const [, claimedIds] = await client.sendCommand(['XAUTOCLAIM', 'orders/created', GROUP, 'other-instance', '1000', '0-0', 'JUSTID'])
    const claimed = claimedIds.map(id => nOf.get(String(id)))
    expect(claimed.length).toBeGreaterThan(1)
    // the other consumer handles them
    await client.sendCommand(['XACK', 'orders/created', GROUP, ...claimedIds.map(String)])
    process.kill(consumer.pid, 'SIGCONT')

    // an entry after them marks the end of the paused consumer's batch
    await client.sendCommand(['XADD', 'orders/created', '*', 'message', JSON.stringify({ data: { n: 9 } })])
    await waitFor(async () => (await received()).includes(9), { timeout: 30000, what: 'the entry after the batch' })
    const handledByBoth = (await received()).filter(n => claimed.includes(n))
    expect(handledByBoth.length).toBeLessThanOrEqual(1)
  })
})
