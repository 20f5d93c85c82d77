const { startApp } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES } = require('../support/outbox')
const cds = require('@sap/cds')

const USERS = { ops: { password: 'ops', roles: ['internal-user'] } }
const app = startApp({
  requires: {
    auth: { kind: 'mocked', users: USERS },
    queue: { pollInterval: '200ms', maxAttempts: 1 },
    OwnQueue: { outboxed: { maxAttempts: 1, secretHeaders: ['x-acme-*'], keepHeaders: ['X-Client-Session'] } }
  },
  log: { levels: { queue: 'info' } }
})

const PASSWORD = 'pa55-w0rd-secret'
const BASIC = 'Basic ' + Buffer.from(`alice:${PASSWORD}`).toString('base64')
const COOKIE = 'session=cookie-secret-4711'
const TOKEN = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJzZWNyZXQifQ.c2lnbmF0dXJlLXNlY3JldA'
const SECRETS = [PASSWORD, BASIC, Buffer.from(`alice:${PASSWORD}`).toString('base64'), 'cookie-secret-4711', TOKEN, 'csrf-secret-0815']

/**
 * Credentials in the shapes error messages carry them (HTTP clients, database drivers, cloud SDKs echo their
 * request): the text around each, which must stay readable, and the secret, which must be masked.
 */
const SHAPES = [
  ['URL userinfo', 'GET https://deploy:Url-Pw-4711@api.example.com/v1 failed', 'Url-Pw-4711', 'api.example.com/v1'],
  ['database URL', 'connect to postgres://admin:Pg-Pw-0815@db.internal:5432/app refused', 'Pg-Pw-0815', 'db.internal:5432/app'],
  ['x-api-key header', 'request headers: x-api-key: ak-live-4711-secret', 'ak-live-4711-secret', 'request headers'],
  ['X-API-Key header', "headers: { 'X-API-Key': 'AKIA-0815-secret' }", 'AKIA-0815-secret', 'headers'],
  ['client-secret parameter', 'token request client_id=app&client-secret=cs-4711-secret rejected', 'cs-4711-secret', 'client_id=app'],
  ['passwd parameter', 'login user=bob passwd=hunter2-secret failed', 'hunter2-secret', 'user=bob'],
  ['SAS signature', 'PUT https://acct.blob.core.windows.net/c/b?sv=2022-11-02&sig=SaS%2Bsig4711secret%3D&se=2030 403', 'SaS%2Bsig4711secret%3D', 'sv=2022-11-02'],
  ['PEM private key', 'bad key -----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEApem4711secret\n-----END RSA PRIVATE KEY----- given', 'MIIEpAIBAAKCAQEApem4711secret', 'bad key'],
  ['bearer token', `401 with Authorization: Bearer ${TOKEN}`, TOKEN, '401 with'],
  ['basic credentials', `sent ${BASIC}`, BASIC.slice(6), 'sent'],
  ['password in JSON', '{"user":"carol","password":"json-pw-4711"}', 'json-pw-4711', '"user":"carol"'],
  ['apiKey property as printed', "{ apiKey: 'inspect-key-4711', region: 'eu10' }", 'inspect-key-4711', "region: 'eu10'"]
]

describe('faults: secrets', () => {
  let srv
  const logged = []
  beforeAll(async () => {
    srv = cds.unqueued(await cds.connect.to('Target'))
    // everything the plugin logs, to check that no credential reaches the log either
    for (const level of ['error', 'warn', 'info']) {
      jest.spyOn(console, level).mockImplementation((...args) => void logged.push(args.map(a => (a instanceof Error ? a.stack + JSON.stringify(a) : String(a))).join(' ')))
    }
  })
  afterAll(() => jest.restoreAllMocks())
  // every test leaves its messages in the table to read them: the next one starts from an empty table
  const emptyTable = () => DELETE.from(MESSAGES)

  test('no Authorization, Cookie, CSRF or bearer token of the enqueuing request, nor of a failing HTTP call, reaches any column', async () => {
    await emptyTable()
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
    await app.POST('/odata/v4/target/act', { value: 'x' }, {
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

  test('a #failed callback stores the error masked, message and own properties, in the table and for the operator service', async () => {
    await emptyTable()
    const API_KEY = 'ak-prop-4711-secret'
    let received
    srv.on('leak', () => {
      throw Object.assign(new Error(`GET https://svc:Url-Pw-0815@api.example.com failed, Authorization: Bearer ${TOKEN}`), {
        apiKey: API_KEY, statusCode: 502, host: 'api.example.com'
      })
    })
    srv.after('leak/#failed', error => {
      received = error
      // the callback fails too and stays in the table as a dead letter: what an operator reads
      throw new Error('the callback keeps its row')
    })
    await cds.tx(() => cds.queued(srv).emit('leak', {}))
    await waitFor(async () => (await SELECT.from(MESSAGES).where({ event: { like: 'leak%' }, attempts: { '>=': 1 }, status: null })).length === 2, { timeout: 20000, what: 'two dead letters' })
    const { data } = await app.axios.get('/odata/v4/event-queues/DeadOutboxMessages', { auth: { username: 'ops', password: 'ops' } })
    const callback = data.value.find(m => m.msg.includes('leak/#failed'))
    expect(JSON.parse(callback.msg).results).toMatchObject({ statusCode: 502, host: 'api.example.com', apiKey: '***', message: expect.stringContaining('api.example.com') })
    expect(received).toMatchObject({ statusCode: 502, apiKey: '***' })
    const everything = JSON.stringify([await SELECT.from(MESSAGES), data, received])
    for (const secret of [API_KEY, 'Url-Pw-0815', TOKEN]) expect(everything).not.toContain(secret)
  })

  test('masking an error whose property throws when read still records the dead letter, its callback and its log line', async () => {
    await emptyTable()
    let received
    srv.on('unreadable', () => {
      const error = new Error('unreadable failure, password=pw-4711')
      Object.defineProperty(error, 'details', { enumerable: true, get: () => { throw new Error('details cannot be read') } })
      throw error
    })
    srv.after('unreadable/#failed', error => void (received = error))
    logged.length = 0
    await cds.tx(() => cds.queued(srv).emit('unreadable', {}))
    await waitFor(() => received, { timeout: 20000, what: 'the #failed callback' })
    expect(received).toMatchObject({ message: 'unreadable failure, password=***' })
    const dead = await SELECT.one.from(MESSAGES).where({ event: 'unreadable' })
    expect(dead.lastError).toMatch(/^Error: unreadable failure, password=\*\*\*/)
    expect(logged.some(line => line.includes('unreadable failure, password=***'))).toBe(true)
  })

  describe('lastError and the log mask every shape of credential, and keep the text around it', () => {
    beforeAll(async () => {
      srv.on('shape', req => {
        throw new Error(`failed: ${SHAPES[req.data.n][1]}`)
      })
      await emptyTable()
      logged.length = 0
      await cds.tx(async () => {
        for (const n of SHAPES.keys()) await cds.queued(srv).emit('shape', { n })
      })
      await waitFor(async () => (await SELECT.from(MESSAGES).where('event = \'shape\' and lastError is not null')).length === SHAPES.length, { timeout: 20000, what: 'a failed attempt of each' })
    })

    test.each(SHAPES.map((shape, n) => [...shape, n]))('%s', async (_, text, secret, context, n) => {
      const rows = await SELECT.from(MESSAGES).where({ event: 'shape' })
      const { lastError } = rows.find(r => JSON.parse(r.msg).data.n === n)
      expect(lastError).not.toContain(secret)
      expect(lastError).toContain(context)
      expect(lastError).toContain('***')
      const lines = logged.filter(line => line.includes(context))
      expect(lines.length).toBeGreaterThan(0)
      for (const line of lines) expect(line).not.toContain(secret)
    })
  })

  describe('headers', () => {
    // read in the enqueuing transaction: after its commit the message may have run and its row be gone
    const storedHeaders = async event => JSON.parse((await SELECT.one.from(MESSAGES).where({ event })).msg).headers
    const enqueuedHeaders = (queued, event, headers) => cds.tx(async () => (await queued.emit(event, {}, headers), storedHeaders(event)))
    beforeEach(emptyTable)

    test('headers whose names say they carry credentials are not stored, whatever their spelling; the others are kept', async () => {
      const headers = {
        'x-api-key': 'k1-secret', apikey: 'k2-secret', 'x-forwarded-access-token': 'k3-secret', 'X-SAP-Security-Session': 'k4-secret',
        'x-auth-token': 'k5-secret', 'Ocp-Apim-Subscription-Key': 'k6-secret', 'x-amz-security-token': 'k7-secret', authorization: 'Basic k8',
        'x-correlation-id': 'corr-2', 'x-ordering-key': 'order:4711', 'idempotency-key': 'idem-1', 'x-custom': 'kept'
      }
      expect(await enqueuedHeaders(cds.queued(srv), 'hold-headers', headers)).toEqual({ 'x-correlation-id': 'corr-2', 'x-ordering-key': 'order:4711', 'idempotency-key': 'idem-1', 'x-custom': 'kept' })
    })

    test('a queue adds names (wildcards) with secretHeaders and keeps a header the rule would drop with keepHeaders', async () => {
      const own = cds.queued(await cds.connect.to('OwnQueue'))
      const headers = { 'x-acme-tenant-blob': 'acme-secret', 'x-client-session': 'blue', 'x-session-token': 'st-secret', 'x-acme': 'kept' }
      expect(await enqueuedHeaders(own, 'own-headers', headers)).toEqual({ 'x-client-session': 'blue', 'x-acme': 'kept' })
    })
  })
})
