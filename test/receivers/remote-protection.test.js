const http = require('http')
const { startApp } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES, messages, millis } = require('../support/outbox')
const cds = require('@sap/cds')

const SERVICES = ['CallsRemote', 'SaysRetryAfter', 'Limited', 'Paced', 'Guarded', 'Hanging', 'HangingProbe', 'NeverAnswers']
// the queue's log at info: the circuit breaker's state changes are part of what is tested
startApp({ requires: Object.fromEntries(SERVICES.map(name => [name, { impl: 'srv/plain-service.js' }])), log: { levels: { queue: 'info' } } })

/**
 * A local HTTP server standing for a remote system: `answers` are taken in turn, one per request (status and
 * headers, or `hang`: it never answers); once they run out it answers 200.
 */
async function remoteSystem() {
  const answers = []
  const server = http.createServer((req, res) => {
    req.resume()
    const { status = 200, headers = {}, hang } = answers.shift() ?? {}
    if (hang) return
    res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(status === 200 ? '{"ok":true}' : '{"error":{"message":"busy"}}')
  })
  await new Promise(resolve => server.listen(0, '127.0.0.1', resolve))
  const url = `http://127.0.0.1:${server.address().port}`
  return { url, answers, close: () => new Promise(resolve => { server.closeAllConnections(); server.close(resolve) }) }
}

/** A queued service of its own with queue `options`, whose `event` handler is `handler`. */
async function queueWith(name, options, event, handler) {
  const srv = await cds.connect.to(name)
  srv.on(event, handler)
  return cds.queued(srv, options)
}

/**
 * Lines of the queue's logger (`cds.log('queue')`, warn and info) matching `pattern`, in the order logged while `fn`
 * runs, each as `{ line, at }`: `at` is what `at()` returned when it was logged (the state of the test at that moment).
 */
async function logged(pattern, fn, at = () => undefined) {
  const LOG = cds.log('queue')
  const lines = []
  const spies = ['warn', 'info'].map(level => {
    const log = LOG[level]
    return jest.spyOn(LOG, level).mockImplementation((...args) => {
      const line = args.join(' ')
      if (pattern.test(line)) lines.push({ line, at: at() })
      return log.apply(LOG, args)
    })
  })
  try {
    await fn()
    return lines
  } finally {
    for (const spy of spies) spy.mockRestore()
  }
}

describe('protecting remote systems', () => {
  let remote, api
  beforeAll(async () => {
    remote = await remoteSystem()
    api = await cds.connect.to('RemoteApi', { kind: 'rest', credentials: { url: remote.url, authentication: 'NoAuthentication' } })
  })
  afterAll(() => remote.close())
  afterEach(async () => {
    remote.answers.length = 0
    await DELETE.from(MESSAGES)
  })

  describe('Retry-After', () => {
    let queued
    beforeAll(async () => {
      // a backoff long enough that no retry comes due while the test's flush() runs, however loaded the machine
      queued = await queueWith('CallsRemote', { backoff: { base: 60_000, factor: 1.5 } }, 'call', () => api.get('/ping'))
    })

    /** Emits one `call`, lets it fail once and returns its row. */
    async function failedOnce() {
      await cds.tx(() => queued.emit('call', {}))
      await cds.flush()
      const [row] = await messages()
      expect(row).toMatchObject({ attempts: 1, status: null })
      return row
    }

    test('a 429 of a CAP remote service with Retry-After in seconds makes that the next attempt\'s due time', async () => {
      remote.answers.push({ status: 429, headers: { 'retry-after': '120' } })
      const row = await failedOnce()
      expect(millis(row.dueAt) - millis(row.lastAttemptTimestamp)).toBe(120_000)
    })

    test('a 503 with Retry-After as an HTTP date waits until that date', async () => {
      const at = new Date(Math.ceil((Date.now() + 3_600_000) / 1000) * 1000)
      remote.answers.push({ status: 503, headers: { 'retry-after': at.toUTCString() } })
      const row = await failedOnce()
      expect(millis(row.dueAt)).toBe(at.getTime())
    })

    test('a 429 without Retry-After waits the queue\'s backoff', async () => {
      remote.answers.push({ status: 429 })
      const row = await failedOnce()
      // (1.5^1 - 1) * 60000 ms after a first failure
      expect(millis(row.dueAt) - millis(row.lastAttemptTimestamp)).toBe(30_000)
    })

    test('an error with retryAfter (seconds) set by the handler is honoured the same way', async () => {
      const own = await queueWith('SaysRetryAfter', {}, 'busy', () => {
        throw Object.assign(new Error('quota exceeded'), { retryAfter: 42 })
      })
      await cds.tx(() => own.emit('busy', {}))
      await cds.flush()
      const [row] = await messages()
      expect(row.attempts).toBe(1)
      expect(millis(row.dueAt) - millis(row.lastAttemptTimestamp)).toBe(42_000)
    })
  })

  describe('rateLimit', () => {
    test('no more than count messages of the queue start per period: the rest stay in the table', async () => {
      const calls = []
      const queued = await queueWith('Limited', { rateLimit: { count: 3, per: '1h' } }, 'call', req => void calls.push(req.data.n))
      await cds.tx(async () => {
        for (let n = 0; n < 5; n++) await queued.emit('call', { n })
      })
      await cds.flush()
      expect(calls).toHaveLength(3)
      const left = await messages()
      expect(left).toHaveLength(2)
      expect(left.every(r => r.attempts === 0 && r.status === null)).toBe(true)
    })

    test('the next messages start as the period moves on, never more than count in any period', async () => {
      const starts = []
      const queued = await queueWith('Paced', { rateLimit: { count: 2, per: '300ms' } }, 'call', () => void starts.push(Date.now()))
      await cds.tx(async () => {
        for (let n = 0; n < 6; n++) await queued.emit('call', { n })
      })
      await waitFor(async () => (await messages()).length === 0, { what: 'all six messages processed' })
      expect(starts).toHaveLength(6)
      // The limit counts a message when the runner starts it; its handler begins a few ms later, by a varying amount
      // (at most the 50 ms allowed here). Unlimited, all six would begin within a few ms; a slow machine only spreads them.
      for (let i = 2; i < starts.length; i++) expect(starts[i] - starts[i - 2]).toBeGreaterThanOrEqual(250)
    })
  })

  describe('circuitBreaker', () => {
    test('after N consecutive failures the queue pauses, a probe runs per interval, its success resumes the queue', async () => {
      let calls = 0
      // the remote system is down for the first three calls: two failures open the breaker, the first probe fails too
      const handler = () => {
        calls++
        if (calls <= 3) throw new Error('remote system down')
      }
      const queued = await queueWith('Guarded', { circuitBreaker: { failures: 2, probeInterval: '200ms' }, concurrency: 1, backoff: { base: 0 }, maxAttempts: 20 }, 'call', handler)
      const lines = await logged(/circuit breaker/, async () => {
        await cds.tx(async () => {
          for (let n = 0; n < 5; n++) await queued.emit('call', { n })
        })
        await waitFor(async () => (await messages()).length === 0, { what: 'the queue resumed after a successful probe' })
      }, () => calls)
      // two failures, one failed probe, one successful probe, the other four messages
      expect(calls).toBe(8)
      // with the handler calls made by then: while the breaker was open, only the probes ran
      expect(lines.map(({ line, at }) => [line.replace(/^.*queue Guarded: /, ''), at])).toEqual([
        [expect.stringMatching(/^circuit breaker open after 2 consecutive failed attempts/), 2],
        [expect.stringMatching(/^circuit breaker open after the probe failed/), 3],
        [expect.stringMatching(/^circuit breaker closed/), 4]
      ])
    })

    test('an attempt that ends by handlerTimeout is a failed attempt: a remote system that never answers opens the breaker', async () => {
      let calls = 0
      for (let n = 0; n < 5; n++) remote.answers.push({ hang: true })
      const options = { circuitBreaker: { failures: 2, probeInterval: '1h' }, handlerTimeout: '300ms', concurrency: 1 }
      const queued = await queueWith('Hanging', options, 'call', () => (calls++, api.get('/ping')))
      const lines = await logged(/circuit breaker/, async () => {
        await cds.tx(async () => {
          for (let n = 0; n < 5; n++) await queued.emit('call', { n })
        })
        await cds.flush()
      })
      // open after the second abandoned attempt: the three other messages wait in the table for the probe
      expect(lines.map(({ line }) => line)).toEqual([expect.stringMatching(/queue Hanging: circuit breaker open after 2 consecutive failed attempts/)])
      const rows = await messages()
      expect(rows.filter(r => r.status === 'processing')).toHaveLength(2) // abandoned, taken over once their lease expires
      expect(rows.filter(r => r.status === null && r.attempts === 0)).toHaveLength(3)
      // on a loaded machine a handler may begin after its attempt was abandoned: both do call the remote system
      await waitFor(() => calls === 2, { what: 'the calls of the two abandoned attempts' })
    })

    test('a probe that hangs past handlerTimeout opens the breaker for another interval; the next probe resumes the queue', async () => {
      let calls = 0
      // the first call fails (the breaker opens), the first probe never gets an answer, the next probe succeeds
      remote.answers.push({ status: 503 }, { hang: true })
      // a handlerTimeout that only the hung probe outlives, also on a loaded machine
      const options = { circuitBreaker: { failures: 1, probeInterval: '200ms' }, handlerTimeout: '2s', concurrency: 1, backoff: { base: 0 } }
      const queued = await queueWith('HangingProbe', options, 'call', () => (calls++, api.get('/ping')))
      const lines = await logged(/circuit breaker/, async () => {
        await cds.tx(async () => {
          for (let n = 0; n < 4; n++) await queued.emit('call', { n })
        })
        // all done but the message of the hung probe, which stays claimed until its lease expires
        await waitFor(async () => {
          const rows = await messages()
          return rows.length === 1 && rows[0].status === 'processing'
        }, { what: 'the queue resumed after a hung probe' })
      }, () => calls)
      // the failure, the hung probe, the successful probe, the two other messages
      expect(calls).toBe(5)
      expect(lines.map(({ line, at }) => [line.replace(/^.*queue HangingProbe: /, ''), at])).toEqual([
        [expect.stringMatching(/^circuit breaker open after 1 consecutive failed attempts/), 1],
        [expect.stringMatching(/^circuit breaker open after the probe failed/), 2],
        [expect.stringMatching(/^circuit breaker closed/), 3]
      ])
    })
  })
})

describe('handlerTimeout', () => {
  test('each attempt abandoned by handlerTimeout is charged, also while the breaker it opened holds the queue: a handler that never finishes becomes a dead letter after maxAttempts', async () => {
    let calls = 0
    // Its lease ends within 1 s after it was abandoned, while the breaker it opened keeps the queue from being
    // claimed for 3 s: the row waits, 'processing', for the probe's claim to take it over and count the attempt.
    const options = { handlerTimeout: '200ms', timeout: '1s', maxAttempts: 2, backoff: { base: 0 }, circuitBreaker: { failures: 1, probeInterval: '3s' } }
    const queued = await queueWith('NeverAnswers', options, 'call', () => (calls++, new Promise(() => {})))
    await queued.emit('call', {})
    const [dead] = await waitFor(async () => {
      const rows = await messages()
      return rows.length === 1 && rows[0].attempts >= 2 && rows[0].status !== 'processing' && rows
    }, { timeout: 60000, what: 'the message to be a dead letter after two abandoned attempts' })
    expect(dead.attempts).toBe(2)
    expect(calls).toBe(2)
    await DELETE.from(MESSAGES)
  }, 90000)
})

describe('circuit breaker states', () => {
  const { CircuitBreaker } = require('../../lib/runner/breaker')
  const failure = { kind: 'retry', error: new Error('down'), attempts: 1, delay: 0 }

  test('a probe that was handed back instead of run lets the next message probe', () => {
    const breaker = new CircuitBreaker('q', { failures: 1, probeInterval: 1000 })
    breaker.settled(failure, 0)
    expect(breaker.allowance(500)).toBe(0)
    expect(breaker.allowance(1000)).toBe(1)
    breaker.started()
    expect(breaker.allowance(1000)).toBe(0)
    breaker.settled({ kind: 'deferred', dueAt: new Date(1000) }, 1000)
    expect(breaker.state).toBe('probing')
    expect(breaker.allowance(1000)).toBe(1)
  })

  test('an abandoned attempt is a failure: an abandoned probe opens the breaker for another interval', () => {
    const breaker = new CircuitBreaker('q', { failures: 2, probeInterval: 1000 })
    breaker.settled({ kind: 'abandoned' }, 0)
    expect(breaker.state).toBe('closed')
    breaker.settled({ kind: 'abandoned' }, 0)
    expect(breaker.state).toBe('open')
    expect(breaker.allowance(1000)).toBe(1)
    breaker.started()
    breaker.settled({ kind: 'abandoned' }, 1000)
    expect(breaker.state).toBe('open')
    expect(breaker.opensAt(1500)).toBe(2000)
  })
})
