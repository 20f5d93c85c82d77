const { startApp } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES, messages } = require('../support/outbox')
const cds = require('@sap/cds')

/**
 * A messaging service's own circuit breaker (lib/runner/broker-waits.ts), for relay failures that do not say whether
 * the broker is away: a messaging adapter of the app's own (test/app/srv/flaky-messaging.js) fails with a plain error
 * while its broker is down. After 5 consecutive failed relays its events wait, charged nothing, and a probe every 30 s
 * finds the broker back; the app's other queued services go on meanwhile.
 */
startApp({
  requires: {
    queue: { backoff: { base: 10, factor: 2, max: 50 }, pollInterval: '200ms' },
    flaky: { impl: 'srv/flaky-messaging.js' }
  }
})
const { brokerWaits } = require('../../lib/runner/broker-waits')
const PROBE_INTERVAL = 30_000

const broker = () => require(require('path').join(cds.root, 'srv/flaky-messaging.js')).broker
const attemptsCharged = async () => (await messages()).reduce((sum, row) => sum + row.attempts, 0)

describe("a messaging service's circuit breaker for failures it cannot tell apart", () => {
  afterEach(() => DELETE.from(MESSAGES))

  test('after 5 failed relays its events wait uncharged, other services run, and a probe that succeeds relays them all', async () => {
    const flaky = await cds.connect.to('flaky')
    broker().down = true
    for (let n = 0; n < 10; n++) await cds.tx(() => flaky.emit('orders/created', { n }))
    const [wait] = await waitFor(() => brokerWaits.current.length && brokerWaits.current, { what: 'the breaker to begin a wait' })
    expect(wait).toMatchObject({ service: 'flaky', suspected: true, reason: expect.stringMatching(/the broker answered something unexpected/) })
    // the failures that opened it were charged (the broker may have refused each); nothing after them is
    const charged = await attemptsCharged()
    expect(charged).toBe(5)
    expect((await messages()).every(row => row.attempts < 10)).toBe(true)
    // another queued service of the app runs while the broker's events wait
    const target = await cds.connect.to('Target')
    const ran = []
    target.on('other', req => ran.push(req.data.n))
    await cds.tx(() => cds.queued(target).emit('other', { n: 1 }))
    await waitFor(() => ran.length === 1, { what: 'the other service to run' })
    broker().down = false
    await waitFor(async () => (await messages()).length === 0, { timeout: PROBE_INTERVAL + 20_000, what: 'the probe, then every event relayed' })
    expect(broker().published.map(d => d.n).sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    expect(brokerWaits.current).toEqual([])
  }, PROBE_INTERVAL + 40_000)
})
