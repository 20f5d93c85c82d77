require('../support/telemetry')
const { startApp, onPostgres, onPortableStore } = require('../support/app')
const { runCli } = require('../support/cli')
const { scrape, points } = require('../support/telemetry')
const { waitFor } = require('../support/wait')
const { MESSAGES, messages } = require('../support/outbox')
const { OPERATOR_USERS: USERS } = require('../support/operators')
const cds = require('@sap/cds')

/**
 * An operable breaker and pause/resume: a queue's state (paused by whom, its circuit breaker) in the operator
 * service's statistics(), the gauges and the health check, and `pause`/`resume` over OData and with the CLI. Across
 * instances and restarts: test/runner/rate-limit-instances.test.js's neighbour, test/operations/queue-controls-instances.test.js.
 */
const SERVICES = ['Billing', 'Slow', 'Flaky', 'Lagging', 'Idle']
const signalled = onPostgres() && !onPortableStore()
const app = startApp({
  requires: {
    auth: { kind: 'mocked', users: USERS },
    // the CLI's changes reach the app at its next poll, or at once by PostgreSQL's notification
    queue: { pollInterval: signalled ? '1h' : '300ms', statisticsInterval: '1s' },
    ...Object.fromEntries(SERVICES.map(name => [name, { impl: 'srv/plain-service.js' }])),
    // configured, not only created in code: the CLI knows the queues the app's configuration names
    Lagging: { impl: 'srv/plain-service.js', outboxed: { maxAttempts: 4 } }
  },
  log: { levels: { odata: 'warn', error: 'error', queue: 'info' } }
})

const DLQ = '/odata/v4/event-queues'
const asOps = { auth: { username: 'ops', password: USERS.ops.password }, validateStatus: () => true }
const post = (action, body) => app.axios.post(`${DLQ}/${action}`, body, asOps)
const statistics = async () => (await app.axios.get(`${DLQ}/statistics()`, asOps)).data.value
const rowOf = async queue => (await statistics()).find(s => s.queue === queue)
const cli = args => runCli(args, { env: { CDS_CONFIG: process.env.CDS_CONFIG } })

/** A queued service with a queue of its own (`options`), whose `event` handler is `handler`. */
async function queueWith(name, options, event, handler) {
  const srv = await cds.connect.to(name)
  srv.on(event, handler)
  return cds.queued(srv, options)
}

/** The queue logger's own info, as the app has it: a spy left behind by a failed test never calls a spy. */
const INFO = cds.log('queue').info

/** Collects the info lines of `cds.log('queue')` in `lines` until `stop()`. */
function listen() {
  const LOG = cds.log('queue')
  const lines = []
  const info = INFO
  const spy = jest.spyOn(LOG, 'info').mockImplementation((...args) => {
    lines.push(args.join(' '))
    return info.apply(LOG, args)
  })
  return { lines, stop: () => spy.mockRestore() }
}

/** The info lines of `cds.log('queue')` logged while `fn` runs. */
async function logged(fn) {
  const log = listen()
  try {
    await fn()
    return log.lines
  } finally {
    log.stop()
  }
}

afterEach(async () => {
  await DELETE.from(MESSAGES)
  await DELETE.from('cds.outbox.QueueControls')
})

describe('pause and resume', () => {
  test('a paused queue keeps its messages in the table, unattempted; statistics() shows who paused it; resume runs them', async () => {
    const calls = []
    const billing = await queueWith('Billing', { maxAttempts: 5 }, 'bill', req => void calls.push(req.data.n))
    let paused
    const lines = await logged(async () => (paused = await post('pause', { queue: 'Billing' })))
    expect(paused.status).toBe(200)
    expect(paused.data).toMatchObject({ queue: 'Billing', paused: true, pausedBy: 'ops', breaker: null })
    expect(lines).toContainEqual(expect.stringMatching(/queue Billing paused by ops: its messages stay in the table until it is resumed/))

    await cds.tx(async () => {
      for (let n = 0; n < 3; n++) await billing.emit('bill', { n })
    })
    await cds.flush()
    expect(calls).toEqual([])
    const waiting = await messages()
    expect(waiting).toHaveLength(3)
    expect(waiting.every(r => r.attempts === 0 && r.status === null)).toBe(true)
    expect(await rowOf('Billing')).toMatchObject({ pending: 3, paused: true, pausedBy: 'ops', pausedAt: expect.any(String) })

    const resumed = await post('resume', { queue: 'Billing' })
    expect(resumed.data).toMatchObject({ queue: 'Billing', paused: false, pausedBy: null })
    await waitFor(async () => (await messages()).length === 0, { what: 'the resumed queue to run its messages' })
    expect(calls.sort()).toEqual([0, 1, 2])
  })

  test('a handler running when its queue is paused finishes; the next message waits', async () => {
    let release
    const running = new Promise(resolve => (release = resolve))
    const calls = []
    const slow = await queueWith('Slow', { concurrency: 1 }, 'work', async req => {
      calls.push(req.data.n)
      if (req.data.n === 0) await running
    })
    await cds.tx(() => slow.emit('work', { n: 0 }))
    await waitFor(() => calls.length === 1, { what: 'the first handler to run' })
    expect((await post('pause', { queue: 'Slow' })).status).toBe(200)
    await cds.tx(() => slow.emit('work', { n: 1 }))
    release()
    await cds.flush()
    expect(calls).toEqual([0])
    const [left] = await messages()
    expect(left).toMatchObject({ attempts: 0, status: null })
    expect(JSON.parse(left.msg).data).toEqual({ n: 1 })
  })

  test('pause and resume name a queue: another name answers 404, none 400', async () => {
    expect((await post('pause', { queue: 'NoSuchQueue' })).status).toBe(404)
    expect((await post('resume', { queue: 'NoSuchQueue' })).status).toBe(404)
    const missing = await post('pause', {})
    expect(missing.status).toBe(400)
    expect(missing.data.error.message).toMatch(/Invalid queue of pause: undefined\. Expected the name of a queue/)
    // a queue with messages but no configuration of its own is a queue (the default queue's settings run it)
    await INSERT.into(MESSAGES).entries({ ID: cds.utils.uuid(), timestamp: new Date(Date.now() + 3_600_000).toISOString(), target: 'ElsewhereConfigured', msg: '{}' })
    expect((await post('pause', { queue: 'ElsewhereConfigured' })).status).toBe(200)
  })

  test('the CLI pauses and resumes a queue as its operator; status shows the pause and leaves its lag out of --max-lag', async () => {
    const calls = []
    const lagging = await cds.connect.to('Lagging')
    lagging.on('ping', () => void calls.push(1))
    const queued = cds.queued(lagging)
    const log = listen()
    try {
      const paused = await cli(['pause', 'Lagging'])
      expect(paused).toMatchObject({ code: 0, stderr: '' })
      expect(paused.stdout).toMatch(/Paused queue Lagging/)
      const by = (await rowOf('Lagging')).pausedBy
      expect(by).toMatch(/ \(cli\)$/)
      // the app learns of it at its next poll (at once on PostgreSQL's notification), and logs it with who paused it
      await waitFor(() => log.lines.some(line => /queue Lagging is paused \(by .* \(cli\) at /.test(line)), { timeout: 20000, what: 'the app to learn of the pause' })
      await cds.tx(() => queued.emit('ping', {}))
      await cds.flush()
      expect(calls).toEqual([])
      expect(await messages()).toMatchObject([{ attempts: 0, status: null }])
      // its oldest message lags on purpose: --max-lag leaves it out and says so
      await waitFor(async () => (await rowOf('Lagging')).relayLag >= 1, { what: 'a relay lag of a second' })
      const status = await cli(['status', '--max-lag', '500ms'])
      expect(status.code).toBe(0)
      expect(status.stdout).toMatch(/Lagging .*paused/)
      expect(status.stderr).toMatch(/relay lag of Lagging .* is not checked: the queue is paused \(by .* \(cli\)/)
      const resumed = await cli(['resume', 'Lagging'])
      expect(resumed).toMatchObject({ code: 0 })
      expect(resumed.stdout).toMatch(/Resumed queue Lagging: lifted its pause/)
      await waitFor(async () => (await messages()).length === 0, { timeout: 20000, what: 'the resumed queue to run its messages' })
      expect((await cli(['pause', 'NoSuchQueue'])).code).toBe(2)
    } finally {
      log.stop()
    }
  }, 180000)

  test('the health check leaves a paused queue\'s lag out and names it', async () => {
    await queueWith('Idle', { maxAttempts: 4 }, 'ping', () => {})
    await INSERT.into(MESSAGES).entries({ ID: cds.utils.uuid(), timestamp: new Date(Date.now() - 600_000).toISOString(), target: 'Idle', msg: '{}', dueAt: new Date(Date.now() + 3_600_000).toISOString() })
    await waitFor(async () => (await cds.queued.health({ maxLag: '5m' })).status === 'DOWN', { what: 'the lag check to see the row' })
    expect((await post('pause', { queue: 'Idle' })).status).toBe(200)
    await waitFor(async () => (await cds.queued.health({ maxLag: '5m' })).status === 'UP', { what: 'the lag check to leave the paused queue out' })
    const { checks } = await cds.queued.health({ maxLag: '5m' })
    expect(checks.lag).toMatchObject({ status: 'UP', paused: ['Idle'] })
    const metrics = await scrape()
    expect(points(metrics, 'cds_event_queues.paused', { 'messaging.destination.name': 'Idle' }).map(p => p.value)).toEqual([1])
  })
})

describe('the circuit breaker, for operators', () => {
  test('statistics() and the gauges show it open until its probe time; resume closes it and the messages run', async () => {
    let down = true
    const calls = []
    const flaky = await queueWith('Flaky', { circuitBreaker: { failures: 2, probeInterval: '1h' }, concurrency: 1, backoff: { base: 0 } }, 'call', req => {
      calls.push(req.data.n)
      if (down) throw new Error('remote system down')
    })
    expect((await rowOf('Flaky'))).toBeUndefined()
    const before = Date.now()
    await cds.tx(async () => {
      for (let n = 0; n < 4; n++) await flaky.emit('call', { n })
    })
    await cds.flush()
    expect(calls).toHaveLength(2)
    const open = await rowOf('Flaky')
    expect(open).toMatchObject({ breaker: 'open', paused: false })
    expect(Date.parse(open.breakerUntil)).toBeGreaterThanOrEqual(before + 3_600_000)
    await waitFor(async () => {
      const gauge = points(await scrape(), 'cds_event_queues.circuit_breaker', { 'messaging.destination.name': 'Flaky' })
      return gauge.find(p => p.attributes['cds_event_queues.circuit_breaker.state'] === 'open')?.value === 1
    }, { what: 'the breaker gauge to say open' })

    down = false
    const lines = await logged(async () => expect((await post('resume', { queue: 'Flaky' })).data).toMatchObject({ breaker: 'closed' }))
    expect(lines).toContainEqual(expect.stringMatching(/queue Flaky resumed by ops: closed its circuit breaker \(open\)/))
    await waitFor(async () => (await messages()).length === 0, { what: 'the messages to run once the breaker is closed' })
    expect((await rowOf('Flaky'))).toBeUndefined()
  })
})

// Three instances each took a rate limit's whole window when they created its control row at once (postgres-portable,
// rate-limit-instances.test.js, about 1 run in 4): CAP's UPSERT writes every column on PostgreSQL, the ones it is not
// given as its snapshot saw the row, so the row another transaction had created and written meanwhile lost its window.
describe("a queue's control row, created by several transactions at once", () => {
  const { takeStarts } = require('../../lib/controls/table')
  const limit = { count: 5, per: 3_600_000 }

  test('they share one rate limit window: together they take its count, no more', async () => {
    for (let round = 0; round < 10; round++) {
      const queue = `concurrent-${round}`
      const taken = await Promise.all(Array.from({ length: 4 }, () => cds.tx(() => takeStarts(undefined, queue, limit, 5))))
      expect([queue, taken.reduce((sum, t) => sum + t.granted, 0)]).toEqual([queue, 5])
    }
  })
})
