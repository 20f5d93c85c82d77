const { startApp } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES } = require('../support/outbox')
const cds = require('@sap/cds')

const { POST } = startApp({ requires: { queue: { pollInterval: '200ms', maxAttempts: 1 } } })

const PASSWORD = 'pa55-w0rd-secret'
const BASIC = 'Basic ' + Buffer.from(`alice:${PASSWORD}`).toString('base64')
const COOKIE = 'session=cookie-secret-4711'
const TOKEN = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJzZWNyZXQifQ.c2lnbmF0dXJlLXNlY3JldA'
const SECRETS = [PASSWORD, BASIC, Buffer.from(`alice:${PASSWORD}`).toString('base64'), 'cookie-secret-4711', TOKEN, 'csrf-secret-0815']

describe('faults: secrets', () => {
  test('no Authorization, Cookie, CSRF or bearer token of the enqueuing request, nor of a failing HTTP call, reaches any column', async () => {
    const srv = cds.unqueued(await cds.connect.to('Target'))
    srv.on('act', req => cds.queued(srv).emit('call-remote', { value: req.data.value }))
    let failedSeen = false
    srv.on('call-remote', () => {
      // an HTTP client's error carries its whole request, credentials included
      throw Object.assign(new Error(`Request failed with status code 401: Authorization: Bearer ${TOKEN}`), {
        config: { headers: { Authorization: `Bearer ${TOKEN}`, Cookie: COOKIE }, auth: { password: PASSWORD } },
        request: { _header: `GET / HTTP/1.1\r\nAuthorization: ${BASIC}\r\n` },
        statusCode: 401
      })
    })
    srv.on('call-remote/#failed', () => void (failedSeen = true))
    await POST('/odata/v4/target/act', { value: 'x' }, {
      headers: { Authorization: BASIC, Cookie: COOKIE, 'X-CSRF-Token': 'csrf-secret-0815', 'x-correlation-id': 'corr-1' }
    })
    // the message is a dead letter (one attempt), its #failed callback ran: every column has been written
    await waitFor(() => failedSeen, { timeout: 20000, what: 'the #failed callback' })
    const rows = await SELECT.from(MESSAGES)
    expect(rows.length).toBeGreaterThanOrEqual(1)
    const dead = rows.find(r => r.lastError)
    expect(dead.lastError).toMatch(/status code 401/)
    expect(dead.lastError.length).toBeLessThanOrEqual(4000)
    const everything = JSON.stringify(rows)
    for (const secret of SECRETS) expect(everything).not.toContain(secret)
    expect(everything).toContain('corr-1') // the correlation id is kept: only credentials are dropped
  })
})
