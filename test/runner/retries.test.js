const { startApp } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES, messages, millis } = require('../support/outbox')
const cds = require('@sap/cds')

startApp({ requires: { queue: { maxAttempts: 3, backoff: { base: 20, max: 100 }, maxErrorLength: 300 } } })

/** Flushes until the single message's row satisfies `done`. */
async function rowUntil(done, what) {
  return waitFor(async () => {
    await cds.flush()
    const [row] = await messages()
    return row && done(row) && row
  }, { timeout: 15000, what })
}

describe('retries and dead letters', () => {
  let srv, queued
  beforeAll(async () => {
    srv = await cds.connect.to('Target')
    queued = cds.queued(srv)
  })
  afterEach(() => DELETE.from(MESSAGES))

  test('a failed attempt records attempts, a bounded lastError and lastAttemptTimestamp, and waits CAP\'s backoff', async () => {
    // CAP's curve (base 1 s, factor 1.5) on a queue of its own, so the row stays put after its first failure
    const plain = cds.queued(await cds.connect.to('Plain'), { backoff: { base: 1000, factor: 1.5 } })
    cds.unqueued(plain).on('fails-long', () => { throw new Error('x'.repeat(1000)) })
    const before = Date.now()
    await cds.tx(() => plain.emit('fails-long', {}))
    const row = await waitFor(async () => {
      const [r] = await messages()
      return r?.attempts === 1 && r.status === null && r
    }, { what: 'first failed attempt' })
    expect(row.lastError.length).toBeLessThanOrEqual(300)
    expect(row.lastError).toMatch(/^Error: x+/)
    const last = millis(row.lastAttemptTimestamp)
    expect(last).toBeGreaterThanOrEqual(before - 5)
    // (1.5^1 - 1) * 1000 ms = 500 ms, as CAP waits after a first failure
    expect(millis(row.dueAt) - last).toBeGreaterThanOrEqual(499)
    expect(millis(row.dueAt) - last).toBeLessThanOrEqual(501)
  })

  test('after maxAttempts the message is a dead letter that stays in the table', async () => {
    let runs = 0
    srv.on('always-fails', () => { runs++; throw new Error('remote is down') })
    await cds.tx(() => queued.emit('always-fails', {}))
    const row = await rowUntil(r => r.attempts >= 3, 'dead letter')
    expect(row).toMatchObject({ attempts: 3, dueAt: null, status: null })
    expect(row.lastError).toContain('remote is down')
    expect(runs).toBe(3)
  })

  test('an error with unrecoverable = true makes a dead letter at once', async () => {
    let runs = 0
    srv.on('unrecoverable', () => { runs++; throw Object.assign(new Error('payload rejected'), { unrecoverable: true }) })
    await cds.tx(() => queued.emit('unrecoverable', {}))
    const row = await rowUntil(r => r.dueAt === null, 'dead letter')
    expect(runs).toBe(1)
    expect(row.attempts).toBe(3)
  })

  test('a TypeError dead-letters only that message; the process keeps processing the others', async () => {
    const ok = []
    srv.on('buggy', req => req.data.missing.property)
    srv.on('fine', req => void ok.push(req.data.n))
    await cds.tx(async () => {
      await queued.emit('buggy', {})
      for (let n = 0; n < 5; n++) await queued.emit('fine', { n })
    })
    await waitFor(async () => { await cds.flush(); return ok.length === 5 }, { what: 'the other messages' })
    const rows = await messages()
    expect(rows).toHaveLength(1)
    expect(rows[0]).toMatchObject({ attempts: 3, dueAt: null })
    expect(rows[0].lastError).toMatch(/^TypeError/)
  })

  test('a row whose msg is not valid JSON becomes a dead letter and does not stop the runner', async () => {
    const ok = []
    srv.on('after-corrupt', () => void ok.push(1))
    await INSERT.into(MESSAGES).entries({ ID: cds.utils.uuid(), timestamp: new Date().toISOString(), target: 'queue', msg: '{"event": "broken", ' })
    await cds.tx(() => queued.emit('after-corrupt', {}))
    await waitFor(async () => { await cds.flush(); return ok.length === 1 })
    const [row] = await messages()
    expect(row).toMatchObject({ dueAt: null, attempts: 3 })
    expect(row.lastError).toContain('Corrupt message')
  })

  test('a message for a service that does not exist is retried, then dead-lettered, never fatal', async () => {
    const msg = JSON.stringify({ 'cds.internal.user': 'u', service: 'NoSuchService', context: {}, event: 'x', data: {} })
    await INSERT.into(MESSAGES).entries({ ID: cds.utils.uuid(), timestamp: new Date().toISOString(), target: 'queue', msg })
    const row = await rowUntil(r => r.dueAt === null, 'dead letter for the unknown service')
    expect(row.attempts).toBe(3)
    expect(row.lastError).toContain('NoSuchService')
  })

  test('lastError keeps no credentials an HTTP client error carries', async () => {
    srv.on('http-error', () => {
      throw Object.assign(new Error('Request failed with status code 502'), {
        config: { headers: { Authorization: 'Bearer eyJsecret.token.value' } },
        statusCode: 502
      })
    })
    await cds.tx(() => queued.emit('http-error', {}))
    const row = await rowUntil(r => r.attempts >= 1, 'failed attempt')
    expect(row.lastError).toContain('status code 502')
    expect(row.lastError).not.toContain('eyJsecret')
  })
})
