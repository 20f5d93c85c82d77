const { execFile } = require('child_process')
const path = require('path')
const { promisify } = require('util')
const { startApp, APP, onPostgres } = require('../support/app')
const { waitFor } = require('../support/wait')
const cds = require('@sap/cds')

/**
 * The undocumented CAP behaviours the plugin relies on (lib/cap/, one file each), stated as tests. When a CAP version
 * changes one of them, its test here fails and names the assumption: review lib/cap/ before upgrading.
 */
const app = startApp({
  requires: {
    queue: { pollInterval: '1h' },
    // lib/cap/messaging.ts: an inbox configured with an object
    contractInbox: { kind: 'local-messaging', inboxed: { messageId: 'data.ID' }, outboxed: false }
  },
  log: { levels: { 'redis-messaging': 'silent' } }
})

// A custom route between CAP's middlewares, as the ops page is mounted (lib/cap/middlewares.ts).
cds.on('bootstrap', express => {
  const { before, after } = require('../../lib/cap/middlewares').routeMiddlewares()
  express.use('/contract-route', ...before, (req, res, next) => {
    if (req.query.fail === '401') return next(401)
    if (req.query.fail === '403') return next(Object.assign(new Error('not for you'), { status: 403 }))
    const { user } = cds.context
    res.json({ id: user.id, authenticated: user.is('authenticated-user') })
  }, ...after)
})

const transactions = () => require('../../lib/cap/transactions')

describe('CAP contracts', () => {
  describe('database transactions (lib/cap/transactions.ts)', () => {
    test('cds.db.tx(ctx) returns the transaction a context already has: falsy `ready` until its first statement, then `dbc`', async () => {
      const { transactionOfContext } = transactions()
      await cds.tx(async () => {
        const tx = transactionOfContext()
        expect(tx).toBe(cds.db.tx(cds.context))
        expect(tx.ready).toBeFalsy()
        await SELECT.one.from('cds.outbox.Messages')
        expect(tx.ready).toBeTruthy()
        expect(typeof tx.ready).not.toBe('string')
        expect(tx.dbc).toBeTruthy()
      })
    })

    test('a transaction begun by setting `ready = begin()` is joined by CAP statements of the same context, on the same connection', async () => {
      const { begun, transactionOfContext } = transactions()
      const ID = cds.utils.uuid()
      await cds.tx(async () => {
        const tx = transactionOfContext()
        await begun(tx)
        const connection = tx.dbc
        await INSERT.into('Target.Records').entries({ ID, kind: 'contract' })
        expect(tx.dbc).toBe(connection)
        expect(await SELECT.one.from('Target.Records').where({ ID })).toMatchObject({ kind: 'contract' })
        throw Object.assign(new Error('roll back'), { rollback: true })
      }).catch(e => {
        if (!e.rollback) throw e
      })
      // rolled back with the transaction: the statements were part of it
      expect(await SELECT.one.from('Target.Records').where({ ID })).toBeUndefined()
    })

    test('a root transaction that ended marks its context `tx._done`, and `ready` becomes a string', async () => {
      const { transactionOfContext } = transactions()
      let ctx, tx
      await cds.tx(async () => {
        ctx = cds.context
        tx = transactionOfContext()
        await SELECT.one.from('cds.outbox.Messages')
      })
      expect(ctx.tx._done).toBeTruthy()
      expect(typeof tx.ready).toBe('string')
    })

    test('a begin replaced on the transaction object is what CAP calls before the first statement, once, with `dbc` set when it resolves', async () => {
      const { transactionOfContext, afterBegin } = transactions()
      const calls = []
      await cds.tx(async () => {
        const tx = transactionOfContext()
        afterBegin(tx, async begun => {
          calls.push(begun === tx && begun.dbc ? 'begun' : 'not begun')
        })
        await SELECT.from('cds.outbox.Messages')
        await SELECT.from('cds.outbox.Messages')
        calls.push('statements')
      })
      expect(calls).toEqual(['begun', 'statements'])
    })

    test("a view of a transaction made with Object.create runs a hook before CAP dispatches a statement on it", async () => {
      const { transactionOfContext, withFirstStatementHook, begun } = transactions()
      const calls = []
      await cds.tx(async () => {
        const shared = transactionOfContext()
        const view = withFirstStatementHook(shared, async () => {
          calls.push('hook')
          await begun(shared)
        })
        const rows = await view.run(SELECT.from('cds.outbox.Messages'))
        calls.push(Array.isArray(rows) ? 'rows' : typeof rows)
      })
      expect(calls).toEqual(['hook', 'rows'])
    })

    test("a transaction's first statement begins it through its own `begin`, before a connection is taken: a throwing one keeps it from taking any", async () => {
      const { transactionOfContext, beforeBegin } = transactions()
      await cds.tx(async () => {
        // a service's transaction whose handlers reach the database only later, as a queued message's does
        const tx = transactionOfContext()
        beforeBegin(tx, () => {
          throw new Error('not in this tenant')
        })
        await expect(INSERT.into('Target.Records').entries({ ID: cds.utils.uuid(), kind: 'contract' })).rejects.toThrow('not in this tenant')
        expect([tx.ready, tx.dbc]).toEqual([undefined, undefined])
      })
      let begun
      await cds.tx(async () => {
        const tx = transactionOfContext()
        beforeBegin(tx, () => (begun = 'checked'))
        await SELECT.one.from('Target.Records')
        expect(tx.dbc).toBeTruthy()
      })
      expect(begun).toBe('checked')
    })
  })

  describe('driver connections (lib/cap/drivers.ts)', () => {
    test(`tx.dbc of @cap-js/${onPostgres() ? 'postgres is a pg Client with query({ name, text, values })' : 'sqlite has prepare(sql).run/all(params)'}`, async () => {
      const { executeOnSqlite, executeOnPostgres } = require('../../lib/cap/drivers')
      const { begun, transactionOfContext } = transactions()
      await cds.tx(async () => {
        const tx = transactionOfContext()
        await begun(tx)
        const result = onPostgres()
          ? await executeOnPostgres(tx.dbc, 'SELECT $1::int + 1 AS "n"', [41])
          : await executeOnSqlite(tx.dbc, 'SELECT ? + 1 AS n', [41], true)
        expect(result.rows).toEqual([{ n: 42 }])
      })
    })
  })

  describe('event contexts (lib/cap/contexts.ts)', () => {
    test("srv.tx(ctx) uses the database transaction put in the context's `transactions` registry; cds._with runs with ctx as cds.context", async () => {
      const { contextWithTransaction, runInContext } = require('../../lib/cap/contexts')
      const { transactionOfContext } = transactions()
      await cds.tx(async () => {
        const shared = transactionOfContext()
        const ctx = contextWithTransaction({ user: new cds.User.Privileged('contract'), id: 'ctx-1' }, shared)
        const srv = await cds.connect.to('Target')
        await runInContext(ctx, async () => {
          expect(cds.context).toBe(ctx)
          expect(cds.context.id).toBe('ctx-1')
          expect(cds.db.tx(ctx)).toBe(shared)
          const tx = srv.tx(ctx)
          expect(tx.context).toBe(ctx)
        })
      })
    })

    test("a new cds.EventContext(init) has no transaction, not the caller's: each statement run with it commits on its own", async () => {
      const { runDetached } = require('../../lib/cap/contexts')
      const ID = cds.utils.uuid()
      const caller = cds.tx(async () => {
        await runDetached({ user: new cds.User.Privileged('contract') }, async () => {
          expect(cds.context.tx).toBeUndefined()
          await INSERT.into('test.Records').entries({ ID, kind: 'contract', message: 'detached' })
        })
        throw new Error('the caller rolls back')
      })
      await expect(caller).rejects.toThrow('the caller rolls back')
      expect(await SELECT.one.from('test.Records').columns('message').where({ ID })).toEqual({ message: 'detached' })
    })
  })

  describe('handlers (lib/cap/handlers.ts)', () => {
    test('srv.handlers.on / .after list registered handlers with the event they were registered for', async () => {
      const { hasHandlerFor } = require('../../lib/cap/handlers')
      const srv = new cds.ApplicationService('ContractProbe', cds.model)
      srv.on('*', () => {})
      expect(hasHandlerFor(srv, 'ping/#succeeded')).toBe(false)
      srv.on('ping/#succeeded', () => {})
      srv.after('ping/#failed', () => {})
      expect(hasHandlerFor(srv, 'ping/#succeeded')).toBe(true)
      expect(hasHandlerFor(srv, 'ping/#failed')).toBe(true)
    })
  })

  describe('handlers: input (lib/cap/handlers.ts)', () => {
    test("srv.handle(req), which beforeInput wraps, receives a CREATE before CAP's input processing fills in a generated key", async () => {
      const { beforeInput } = require('../../lib/cap/handlers')
      const srv = await cds.connect.to('Receiver')
      let seen
      beforeInput(srv, req => void (req.event === 'CREATE' && (seen ??= { ...req.data })))
      const created = await srv.create('Bookings').entries({ kind: 'contract', message: 'input' })
      expect(seen).toEqual({ kind: 'contract', message: 'input' })
      expect((await SELECT.one.from('test.Records').where({ kind: 'contract' })).ID).toMatch(/^[0-9a-f-]{36}$/)
      expect(created).toBeDefined()
    })
  })

  describe('pools (lib/cap/pools.ts)', () => {
    test('a database service creates pooled connections through db.pools._factory.create', async () => {
      const factory = cds.db.pools._factory
      expect(typeof factory.create).toBe('function')
      if (!onPostgres()) return
      // the plugin's listener is on every pooled pg connection; a failed one is marked closed for the pool's validation
      const connection = await cds.tx(async () => {
        const tx = transactions().transactionOfContext()
        await transactions().begun(tx)
        return tx.dbc
      })
      expect(connection.listenerCount('error')).toBeGreaterThan(0)
      expect(connection).toHaveProperty('open')
    })

    test("@cap-js/postgres's create connects a Client of its own `pg` (the plugin listens for errors from `connect()` on)", async () => {
      if (!onPostgres()) return
      const { createRequire } = require('module')
      const { Client } = createRequire(require.resolve('@cap-js/postgres'))('pg')
      const connect = Client.prototype.connect
      const connecting = []
      Client.prototype.connect = function (...args) {
        connecting.push(this)
        return connect.apply(this, args)
      }
      let connection
      try {
        connection = await cds.db.pools._factory.create()
      } finally {
        Client.prototype.connect = connect
      }
      expect(connection).toBeInstanceOf(Client)
      expect(connecting).toContain(connection)
      await connection.end()
    })
  })

  describe('pools: connection failures (lib/cap/pools.ts connectionFailures)', () => {
    test("a pool that cannot connect fails an acquire with generic-pool's timeout, which names neither the host nor why", async () => {
      if (!onPostgres()) return
      const { connectionFailures } = require('../../lib/cap/pools')
      const config = require('../support/postgres').dbConfig('none')
      const db = await cds.connect.to('unreachable', { ...config, credentials: { ...config.credentials, port: 1 } })
      const failure = connectionFailures(db)
      try {
        const error = await db.run('SELECT 1').then(() => undefined, e => e)
        expect(error?.message).toMatch(/ResourceRequest timed out/)
        expect(failure()).toMatchObject({ code: 'ECONNREFUSED' })
      } finally {
        await db.disconnect?.()
      }
    })
  })

  describe('profiles (lib/cap/profiles.ts)', () => {
    test("cds.env['defined-profiles'] lists every [name] of a project's configuration and CAP's own profiles", () => {
      const fs = require('fs')
      const os = require('os')
      const folder = fs.mkdtempSync(path.join(os.tmpdir(), 'profiles-'))
      fs.writeFileSync(path.join(folder, 'package.json'), JSON.stringify({ cds: { requires: { '[nightly]': { db: { kind: 'sqlite' } } } } }))
      const { definedProfiles } = require('../../lib/cap/profiles')
      expect(definedProfiles(cds.env.for('cds', folder))).toEqual(expect.arrayContaining(['nightly', 'development', 'production']))
    })
  })

  describe('parameter streams (lib/cap/parameter-streams.ts)', () => {
    const onPostgresOnly = onPostgres() ? test : test.skip
    /** test/support/ended-copy.js in `appDir`: a CQL INSERT whose connection ends right when its COPY is ready. */
    const endedCopy = appDir =>
      new Promise(resolve => {
        const env = { ...process.env, APP: appDir, CDS_CONFIG: JSON.stringify({ requires: { db: { ...cds.db.options, kind: 'postgres' } } }) }
        execFile(process.execPath, [path.join(__dirname, '..', 'support', 'ended-copy.js')], { env, timeout: 60000 }, (error, stdout, stderr) =>
          resolve({ code: error ? error.code : 0, result: stdout.trim().split('\n').pop(), stderr }))
      })

    onPostgresOnly("@cap-js/postgres streams a CQL INSERT's entries through a ParameterStream, a Writable submitted to its pg Client's query", async () => {
      const { Writable } = require('stream')
      const { postgresClient } = require('../../lib/cap/drivers')
      const Client = postgresClient()
      const query = Client.prototype.query
      const submitted = []
      Client.prototype.query = function (config, ...args) {
        if (config instanceof Writable) submitted.push(config)
        return query.call(this, config, ...args)
      }
      try {
        await INSERT.into('test.Records').entries({ ID: cds.utils.uuid(), kind: 'contract-copy' })
      } finally {
        Client.prototype.query = query
      }
      expect(submitted.map(stream => stream.constructor.name)).toEqual(['ParameterStream'])
      const [stream] = submitted
      expect(stream.connection).toBeNull() // released once its COPY completed
      expect([typeof stream.flush, typeof stream._destroy]).toEqual(['function', 'function'])
    })

    // When this fails, @cap-js/postgres handles a connection that ends during the COPY: remove lib/cap/parameter-streams.ts.
    onPostgresOnly("without the plugin, a connection ending while the COPY's chunks wait kills the process (ParameterStream.flushChunk writes to the connection pg set to null)", async () => {
      const { code, stderr } = await endedCopy('cap-app')
      expect({ code, uncaught: stderr.match(/TypeError: Cannot read properties of null \(reading 'stream'\)\s+at ParameterStream\.flushChunk/)?.[0].split('\n')[0] })
        .toEqual({ code: 1, uncaught: "TypeError: Cannot read properties of null (reading 'stream')" })
    })

    onPostgresOnly('with the plugin, that INSERT rejects with the connection\'s error and the process goes on writing', async () => {
      const { code, result, stderr } = await endedCopy('app')
      expect({ code, result, stderr: stderr.match(/TypeError.*/)?.[0] }).toEqual({ code: 0, result: JSON.stringify({ insert: { rejected: '57P01' }, written: true }), stderr: undefined })
    })
  })

  describe('disconnect (lib/cap/lifecycle.ts)', () => {
    test("a database service disconnects through its own `disconnect` on cds 'shutdown', so replacing it on the instance runs first", async () => {
      const { stdout } = await promisify(execFile)(process.execPath, [path.join(__dirname, '..', 'support', 'contract-child.js')], {
        cwd: APP,
        env: { ...process.env, CHECK: 'disconnect-on-shutdown', CDS_CONFIG: JSON.stringify({ requires: { db: { kind: 'sqlite', credentials: { url: ':memory:' } } } }) },
        timeout: 30000
      })
      expect(JSON.parse(stdout.trim().split('\n').pop())).toEqual({ called: true })
    })
  })

  describe('lifecycle (lib/cap/lifecycle.ts)', () => {
    test("`cds serve` runs as cds.cli.command 'serve' and emits 'listening' only after every 'served' handler completed", async () => {
      const { stdout } = await promisify(execFile)(process.execPath, [path.join(__dirname, '..', 'support', 'contract-child.js')], {
        cwd: APP,
        env: { ...process.env, CHECK: 'listening-after-served', TEST_APP_DEPLOY: 'no', CDS_CONFIG: JSON.stringify({ requires: { db: { kind: 'sqlite', credentials: { url: ':memory:' } } } }) },
        timeout: 30000
      })
      expect(JSON.parse(stdout.trim().split('\n').pop())).toEqual({ events: ['served: serve', 'served handler done', 'listening'] })
    })
  })

  describe('requests (lib/cap/requests.ts)', () => {
    test('cds.Service.prototype.send builds its request from each argument form and hands it to this.dispatch', () => {
      const { requestFromSendArgs } = require('../../lib/cap/requests')
      expect(requestFromSendArgs(['ev', { a: 1 }, { h: 'x' }])).toMatchObject({ event: 'ev', data: { a: 1 }, headers: { h: 'x' } })
      expect(requestFromSendArgs([{ event: 'ev', data: { a: 2 } }])).toMatchObject({ event: 'ev', data: { a: 2 } })
      expect(requestFromSendArgs(['POST', '/hooks', { a: 3 }])).toMatchObject({ method: 'POST', path: expect.stringMatching(/^\/?hooks$/), data: { a: 3 } })
      const query = SELECT.from('Target.Records')
      expect(requestFromSendArgs([query]).query).toBe(query)
    })

    test('req.query.flat() gives CQN that survives JSON and cds.ql() without the service-specific targets', async () => {
      const { storableQuery } = require('../../lib/cap/requests')
      const srv = await cds.connect.to('Target')
      let stored
      srv.prepend(() => srv.before('READ', 'Records', req => void (stored = JSON.parse(JSON.stringify(storableQuery(req.query))))))
      await srv.read('Records')
      expect(stored).toMatchObject({ SELECT: { from: { ref: ['Target.Records'] } } })
      expect(stored).not.toHaveProperty('_target')
      expect(Array.isArray(await cds.ql(stored))).toBe(true)
    })
  })

  describe('services (lib/cap/services.ts)', () => {
    test('database services are marked isDatabaseService', () => {
      expect(cds.db.isDatabaseService).toBe(true)
    })

    test("@requires written to a service's definition in init() restricts it over HTTP like a modelled one", async () => {
      const srv = cds.services.EventQueuesService
      expect(srv.definition['@requires']).toEqual(['internal-user'])
      const res = await app.axios.get('/odata/v4/event-queues/DeadOutboxMessages', { validateStatus: () => true })
      expect(res.status).toBe(401)
    })
  })

  describe('middlewares (lib/cap/middlewares.ts)', () => {
    const call = (query, auth) => app.axios.get(`/contract-route${query}`, { auth, validateStatus: () => true })

    test('cds.middlewares.before authenticates a custom route with the configured strategy and sets cds.context.user', async () => {
      expect((await call('', { username: 'alice', password: '' })).data).toEqual({ id: 'alice', authenticated: true })
      expect((await call('')).data).toEqual({ id: 'anonymous', authenticated: false })
    })

    test("cds.middlewares.after answers next(401) with the strategy's login challenge and other errors with their status", async () => {
      const login = await call('?fail=401')
      expect([login.status, login.headers['www-authenticate']]).toEqual([401, 'Basic realm="Users"'])
      const refused = await call('?fail=403', { username: 'alice', password: '' })
      expect([refused.status, refused.data]).toEqual([403, { error: { message: 'not for you' } }])
    })
  })

  describe('request log (lib/cap/request-log.ts)', () => {
    test("the OData adapter logs each request with cds.log('odata').info, read at the request; a level change keeps the filter", async () => {
      const { leaveOutOfRequestLog } = require('../../lib/cap/request-log')
      leaveOutOfRequestLog('odata', () => cds.context?.http?.req.headers['x-contract-quiet'] === 'yes')
      const level = cds.log('odata').level
      cds.log('odata', 'warn')
      cds.log('odata', 'info') // CAP re-assigns the logger's methods here
      const info = jest.spyOn(console, 'info')
      try {
        const get = headers => app.axios.get('/odata/v4/event-queues/DeadOutboxMessages', { headers, auth: { username: 'yves', password: '' } })
        await get({ 'x-contract-quiet': 'yes' })
        await get({})
        const lines = info.mock.calls.map(args => args.join(' ')).filter(line => line.includes('/odata/v4/event-queues/DeadOutboxMessages'))
        expect(lines).toHaveLength(1)
        expect(lines[0]).toMatch(/^\[odata\] - GET /)
      } finally {
        info.mockRestore()
        cds.log('odata', level)
      }
    })
  })

  describe('mtxs (lib/cap/mtxs.ts; with @sap/cds-mtxs: test/multitenancy/multitenancy.sqlite.test.js)', () => {
    test("cds.env.plugins lists the app's plugins: not @sap/cds-mtxs where the app does not depend on it", () => {
      const { mtxsIsPlugin } = require('../../lib/cap/mtxs')
      expect(Object.keys(cds.env.plugins)).toContain('cds-event-queues')
      expect(mtxsIsPlugin()).toBe(false)
    })
  })

  describe('database options (lib/cap/database-options.ts)', () => {
    test('db.options.credentials hold what cds.requires.db configures, enough for a connection of its own', async () => {
      if (!onPostgres()) return expect(cds.db.options.credentials).toHaveProperty('url')
      const { postgresConnectionConfig } = require('../../lib/cap/database-options')
      const { Client } = require('pg')
      const client = new Client(postgresConnectionConfig(cds.db))
      await client.connect()
      try {
        expect((await client.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }])
      } finally {
        await client.end()
      }
    })

    test("@cap-js/sqlite's factory reads the driver from db.options.driver or db.options.credentials.driver", async () => {
      if (onPostgres()) return
      const { configuredSqliteDriver } = require('../../lib/cap/database-options')
      const factory = cds.db.factory.create.toString()
      expect(factory).toMatch(/this\.options\.driver \|\| this\.options\.credentials\?\.driver/)
      // the suite configures none: @cap-js/sqlite picks its default driver
      expect(configuredSqliteDriver(cds.db)).toBeUndefined()
      expect(configuredSqliteDriver({ options: { credentials: { driver: 'sql.js' } } })).toBe('sql.js')
    })

    test('@cap-js/sqlite hands cds.requires.db.client to its driver: where the CLI and the app set the busy timeout', async () => {
      if (onPostgres()) return
      const { waitingForOtherWriters } = require('../../lib/cap/database-options')
      expect(cds.db.factory.create.toString()).toMatch(/new sqlite\(database, this\.options\.client \|\| \{\}\)/)
      const unset = { kind: 'sqlite' }
      waitingForOtherWriters(unset)
      expect(unset.client).toEqual({ timeout: 5000 })
      const configured = { kind: 'sqlite', client: { timeout: 100 } }
      waitingForOtherWriters(configured)
      expect(configured.client).toEqual({ timeout: 100 })
      // the app's own database got it when the plugin loaded (the suite configures none)
      expect(cds.db.options.client).toEqual({ timeout: 5000 })
      // the CLI beside a writing app: cli.test.js "beside an app in the middle of a write…"; beside a handler: "beside a handler that read…"
    })
  })

  describe('messaging (lib/cap/messaging.ts)', () => {
    const fs = require('fs')
    const os = require('os')

    test("a messaging service with format 'cloudevents' keeps the id and time it is given, and makes up a new id otherwise", async () => {
      const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'contract-bus-')), 'bus')
      const bus = await cds.connect.to('contractBus', { kind: 'file-based-messaging', file, format: 'cloudevents', outboxed: false })
      const { isOutboundMessage, sendsCloudEvents } = require('../../lib/cap/messaging')
      expect([isOutboundMessage(bus, {}), isOutboundMessage(bus, { inbound: true }), sendsCloudEvents(bus)]).toEqual([true, false, true])
      await bus.emit('contract/given', {}, { id: 'given-id', time: '2020-01-01T00:00:00.000Z' })
      await bus.emit('contract/generated', {})
      await bus.emit('contract/generated', {})
      const lines = fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map(line => JSON.parse(line.slice(line.indexOf(' ') + 1)))
      expect(lines[0].headers).toMatchObject({ id: 'given-id', time: '2020-01-01T00:00:00.000Z', specversion: '1.0' })
      expect(lines[1].headers.id).toMatch(/^[0-9a-f-]{36}$/)
      expect(lines[2].headers.id).not.toBe(lines[1].headers.id)
    })

    test("with format 'cloudevents' it makes up a source naming the process, keeps one it is given; sourceNamesProcess tells", async () => {
      const { sourceNamesProcess } = require('../../lib/cap/messaging')
      const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'contract-bus-')), 'bus')
      const bus = await cds.connect.to('contractSourceBus', { kind: 'file-based-messaging', file, format: 'cloudevents', outboxed: false })
      await bus.emit('contract/sourced', {}, { source: '/given' })
      await bus.emit('contract/unsourced', {})
      const lines = fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map(line => JSON.parse(line.slice(line.indexOf(' ') + 1)))
      expect(lines.map(l => l.headers.source)).toEqual(['/given', `/default/sap.cap/${process.pid}`])
      expect(sourceNamesProcess(bus)).toBe(true)
    })

    test("a broker adapter hands an outbound message to its broker in `handle`, without the service's handlers: a `before` handler does not see it", async () => {
      const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'contract-bus-')), 'bus')
      const bus = await cds.connect.to('contractHandlers', { kind: 'file-based-messaging', file, outboxed: false })
      const seen = []
      bus.before('*', msg => void seen.push(msg.event))
      await bus.emit('contract/out', { n: 1 })
      expect(seen).toEqual([])
      expect(fs.readFileSync(file, 'utf8')).toContain('contract/out {"data":{"n":1}')
    })

    test('processInboundMsg marks a message inbound and queues it through the global cds.queued when `inboxed` is an object', async () => {
      const { isInboundMessage } = require('../../lib/cap/messaging')
      const inbox = await cds.connect.to('contractInbox')
      const queued = cds.queued
      const calls = []
      cds.queued = (srv, options) => (calls.push(srv.name), queued(srv, options))
      let open
      const gate = new Promise(resolve => (open = resolve))
      inbox.on('contract/in', () => gate)
      try {
        await inbox.processInboundMsg({ user: cds.User.privileged }, { event: 'contract/in', data: { ID: 'c1' }, headers: {} })
      } finally {
        cds.queued = queued
      }
      expect(calls).toEqual(['contractInbox'])
      const [row] = await SELECT.from('cds.outbox.Messages').where({ service: 'contractInbox' })
      expect(isInboundMessage(JSON.parse(row.msg))).toBe(true)
      open()
      await cds.flush()
    })

    test('a remote service sends the headers of a request as HTTP request headers', async () => {
      const http = require('http')
      let received
      const server = http.createServer((req, res) => ((received = req.headers), res.writeHead(200, { 'content-type': 'application/json' }).end('{}')))
      await new Promise(resolve => server.listen(0, '127.0.0.1', resolve))
      try {
        const remote = await cds.connect.to('contractRemote', { kind: 'rest', credentials: { url: `http://127.0.0.1:${server.address().port}` }, outboxed: false })
        await remote.send({ method: 'POST', path: '/calls', data: {}, headers: { 'Idempotency-Key': '"k-1"' } })
        expect(received['idempotency-key']).toBe('"k-1"')
      } finally {
        await new Promise(resolve => server.close(resolve))
      }
    })

    // CAP's base messaging service, not local-messaging (which keeps topics as they are); configured, so that the
    // runner finds it by name
    const connect = (name, options = {}) => {
      cds.requires[name] = { impl: '@sap/cds/libx/_runtime/messaging/service.js', outboxed: false, ...options }
      return cds.connect.to(name)
    }
    const { outbound, subscribedTopics, listensToAll, deliverInbound, markRelayed } = require('../../lib/cap/messaging')

    test('srv.message4(msg) gives the topic with publishPrefix and, with format cloudevents, the CloudEvents attributes', async () => {
      const srv = await connect('ContractMessaging', { format: 'cloudevents', publishPrefix: 'pre/' })
      const message = outbound(srv, new cds.Event({ event: 'orders/created', data: { n: 1 }, headers: { 'x-own': 'kept' } }))
      expect(message).toEqual({
        event: 'pre/orders/created',
        data: { n: 1 },
        headers: expect.objectContaining({ 'x-own': 'kept', specversion: '1.0', type: 'orders/created', id: expect.any(String), time: expect.any(String) })
      })
    })

    test('srv.on fills srv.subscribedTopics with the topic (subscribePrefix applied); srv.on("*") sets _listenToAll', async () => {
      const srv = await connect('ContractSubscriber', { subscribePrefix: 'sub/' })
      srv.on('orders/created', () => {})
      expect(subscribedTopics(srv)).toEqual(['sub/orders/created'])
      expect(listensToAll(srv)).toBe(false)
      srv.on('*', () => {})
      expect(listensToAll(srv)).toBe(true)
    })

    test("srv.processInboundMsg runs the subscriber in a transaction and resolves once it committed, rejects when it failed", async () => {
      const srv = await connect('ContractInbound')
      srv.on('orders/created', async msg => {
        await INSERT.into('Target.Records').entries({ ID: msg.data.ID, kind: 'inbound' })
        if (msg.data.fail) throw new Error('subscriber failed')
      })
      const ok = cds.utils.uuid()
      await deliverInbound(srv, undefined, { event: 'orders/created', data: { ID: ok }, headers: {} })
      // committed: another transaction sees it
      expect(await cds.tx(() => SELECT.one.from('Target.Records').where({ ID: ok }))).toMatchObject({ kind: 'inbound' })
      const failing = cds.utils.uuid()
      await expect(deliverInbound(srv, undefined, { event: 'orders/created', data: { ID: failing, fail: true }, headers: {} })).rejects.toThrow('subscriber failed')
      expect(await cds.tx(() => SELECT.one.from('Target.Records').where({ ID: failing }))).toBeUndefined()
    })

    test('with inboxed: true, srv.processInboundMsg writes the inbox row through cds.queued(srv) and resolves once it committed', async () => {
      const srv = await connect('ContractInbox', { inboxed: true })
      const received = []
      srv.on('orders/created', msg => received.push(msg.data.n))
      await deliverInbound(srv, undefined, { event: 'orders/created', data: { n: 7 }, headers: {} })
      // committed when it resolved: the row is there, or the runner already ran it from there
      const rows = await cds.tx(() => SELECT.from('cds.outbox.Messages').where({ msg: { like: '%"service":"ContractInbox"%' } }))
      expect(rows.length + received.length).toBeGreaterThan(0)
      await cds.flush()
      expect(received).toEqual([7])
    })

    test("CAP's Redis adapter fails a message marked as relayed (_fromOutbox) at once while its connection is down", async () => {
      const redis = require('../../scripts/redis-server')
      const server = await redis.startServer({ password: 'secret' })
      const adapter = cds.unqueued(await cds.connect.to('ContractRedis', { kind: 'redis-messaging', credentials: { uri: `redis://default:secret@127.0.0.1:${server.port}` } }))
      try {
        await redis.haltServer(server, 'SIGKILL')
        await waitFor(() => !adapter.client.isReady, { what: "the adapter's client to notice" })
        const event = new cds.Event({ event: 'orders/created', data: {} })
        markRelayed(event)
        await expect(adapter.tx({}, tx => tx.dispatch(event))).rejects.toThrow('Redis connection not ready')
      } finally {
        adapter.client.destroy()
        await redis.stopServer(server)
      }
    })
  })

  describe('broker connections (lib/cap/broker-connections.ts)', () => {
    const { isBrokerUnavailable, availabilityOf } = require('../../lib/messaging/availability')
    const { markRelayed } = require('../../lib/cap/messaging')
    const source = file => require('fs').readFileSync(require.resolve(`@sap/cds/libx/_runtime/messaging/${file}`), 'utf8')

    test("CAP's redis-messaging: a relay while Redis is away fails with an error that says so, and its client tells when Redis is back", async () => {
      const redis = require('../../scripts/redis-server')
      const server = await redis.startServer({ password: 'secret' })
      const adapter = cds.unqueued(await cds.connect.to('ContractRedisBack', { kind: 'redis-messaging', credentials: { uri: `redis://default:secret@127.0.0.1:${server.port}` } }))
      try {
        const availability = availabilityOf(adapter)
        expect(availability.available).toBe(true)
        let back = 0
        availability.onAvailable(() => back++)
        await redis.haltServer(server, 'SIGKILL')
        await waitFor(() => !availability.available, { what: "the adapter's client to notice" })
        const event = new cds.Event({ event: 'orders/created', data: {} })
        markRelayed(event)
        const error = await adapter.tx({}, tx => tx.dispatch(event)).then(() => undefined, e => e)
        expect(error?.message).toBe('Redis connection not ready')
        expect(isBrokerUnavailable(error)).toBe(true)
        await redis.restartServer(server)
        await waitFor(() => back > 0, { timeout: 30000, what: "the client's 'ready' after Redis is back" })
        expect(availability.available).toBe(true)
      } finally {
        adapter.client.destroy()
        await redis.stopServer(server)
      }
    })

    // No AMQP broker or Event Mesh here: what the plugin reads is checked in CAP's source
    test("CAP's AMQP adapter fails a relayed message with 'AMQP: Sender is not open' while its sender is not open, and 'Connection error' when it cannot connect", () => {
      expect(source('common-utils/AMQPClient.js')).toContain("if (msg._fromOutbox && !this.sender.opened()) throw new Error('AMQP: Sender is not open')")
      expect(source('common-utils/connections.js')).toContain("const e = new Error('Connection error')")
      expect(isBrokerUnavailable(new Error('AMQP: Sender is not open'))).toBe(true)
    })

    test("CAP's Event Mesh over HTTP rejects a failed call with its statusCode: 502, 503 and 504 say the service is away, others are a refusal", () => {
      expect(source('common-utils/authorizedRequest.js')).toContain('const result = { body, headers: res.headers, statusCode: res.statusCode }')
      expect(source('http-utils/token.js')).toContain("const errorObj = new Error('Authorization failed')")
      expect(isBrokerUnavailable({ body: '', headers: {}, statusCode: 503 })).toBe(true)
      expect(isBrokerUnavailable(Object.assign(new Error('Authorization failed'), { response: { statusCode: 504 } }))).toBe(true)
      expect(isBrokerUnavailable({ body: '', headers: {}, statusCode: 400 })).toBe(false)
      expect(isBrokerUnavailable(new Error('the broker refused it'))).toBe(false)
    })
  })

  describe('connect options (lib/cap/connect-options.ts)', () => {
    test('cds.connect.to reads cds.requires[name] when it connects (a getter there runs then) and queues by its outboxed', async () => {
      const read = []
      cds.requires.ContractLazy = { impl: 'srv/plain-service.js' }
      Object.defineProperty(cds.requires.ContractLazy, 'outboxed', { enumerable: true, get: () => (read.push('outboxed'), true) })
      const srv = await cds.connect.to('ContractLazy')
      expect(read.length).toBeGreaterThan(0)
      expect(srv).not.toBe(cds.unqueued(srv))
    })

    test("a string impl is loaded from cds.root (CAP's factory): the class the plugin inspects is the one CAP instantiates", async () => {
      cds.requires.ContractCustom = { impl: 'srv/custom-messaging.js' }
      require('../../lib/cap/connect-options').queueMessagingImpls({ ContractCustom: cds.requires.ContractCustom })
      const srv = await cds.connect.to('ContractCustom')
      expect(cds.unqueued(srv)).toBeInstanceOf(require(require('path').join(cds.root, 'srv/custom-messaging.js')))
      expect(srv).not.toBe(cds.unqueued(srv))
    })
  })

  describe('paging (lib/cap/paging.ts)', () => {
    test('a before READ handler that lowers SELECT.limit.rows pages the OData collection with nextLinks that reach every row', async () => {
      const { limitPage } = require('../../lib/cap/paging')
      const target = await cds.connect.to('Target')
      const rows = Array.from({ length: 5 }, (_, n) => ({ ID: cds.utils.uuid(), kind: 'paged', message: `m${n}` }))
      await INSERT.into('Target.Records').entries(rows)
      let paging = true
      target.before('READ', 'Records', req => paging && limitPage(req.query, 2))
      const paged = `$filter=${encodeURIComponent("kind eq 'paged'")}`
      try {
        const seen = []
        const pages = []
        for (let url = `/odata/v4/target/Records?${paged}&$orderby=message`; url; ) {
          const { data } = await app.axios.get(url)
          pages.push(data.value.length)
          seen.push(...data.value.map(r => r.message))
          url = data['@odata.nextLink'] && `/odata/v4/target/${data['@odata.nextLink']}`
        }
        expect(pages).toEqual([2, 2, 1])
        expect(seen).toEqual(['m0', 'm1', 'm2', 'm3', 'm4'])
        // a client's smaller $top stays; a single row's read is not paged
        expect((await app.axios.get(`/odata/v4/target/Records?${paged}&$top=1`)).data.value).toHaveLength(1)
        expect((await app.axios.get(`/odata/v4/target/Records(${rows[0].ID})`)).data).toMatchObject({ message: 'm0' })
      } finally {
        paging = false
        await DELETE.from('Target.Records').where({ kind: 'paged' })
      }
    })
  })

  describe('inbound messages (lib/cap/messaging.ts)', () => {
    test('processInboundMsg of an inboxed service stores the message as queued, marked inbound, with the `queue` it was given', async () => {
      const { isInboundMessage, deliverInbound } = require('../../lib/cap/messaging')
      const { decode } = require('../../lib/codec')
      const release = require('../../lib/plugin').eventQueues().runner.hold()
      try {
        const outer = cds.context
        await deliverInbound(await cds.connect.to('inbox'), undefined, { event: 'contract/inbound', data: { n: 1 }, headers: { 'x-id': 'i1' }, queue: { mark: 'copy' } })
        expect(cds.context).toBe(outer)
        const rows = await SELECT.from('cds.outbox.Messages').where({ event: 'contract/inbound' })
        expect(rows).toHaveLength(1)
        const { serviceName, request } = decode(rows[0].msg, rows[0].target)
        expect(serviceName).toBe('inbox')
        expect(request).toMatchObject({ inbound: true, event: 'contract/inbound', data: { n: 1 }, headers: { 'x-id': 'i1' }, queue: { mark: 'copy' } })
        expect(isInboundMessage(request)).toBe(true)
        await DELETE.from('cds.outbox.Messages').where({ ID: rows[0].ID })
      } finally {
        release()
      }
    })
  })

  describe('UPSERT (lib/controls/table.ts creates control rows without it on SQLite and PostgreSQL)', () => {
    // CAP's UPSERT writes every column of the entity, those it is not given as its statement's snapshot saw the row.
    // On PostgreSQL, one that waited for another transaction's insert of the same key overwrites what that one wrote.
    ;(onPostgres() ? test : test.skip)("on PostgreSQL, an UPSERT of a row's keys that waited for another transaction's insert of them writes the other columns back to null", async () => {
      const CONTROLS = 'cds.outbox.QueueControls'
      const row = { appid: '', queue: 'contract-upsert' }
      const first = cds.db.tx()
      await first.run(INSERT.into(CONTROLS).entries(row))
      const upsert = cds.tx(tx => tx.run(UPSERT.into(CONTROLS).entries(row)))
      await waitFor(async () => (await cds.db.run("SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT%'"))[0].n > 0, { what: 'the UPSERT to wait for the insert' })
      await first.run(UPDATE(CONTROLS).set({ rateWindow: 'written by the first' }).where(row))
      await first.commit()
      await upsert
      expect(await SELECT.one.from(CONTROLS).columns('rateWindow').where(row)).toEqual({ rateWindow: null })
    })
  })

  describe('implicit', () => {
    test('cds.connect.to queues services configured `outboxed` by calling the global cds.queued', async () => {
      const outboxed = await cds.connect.to('Outboxed')
      expect(outboxed).not.toBe(cds.unqueued(outboxed))
      expect(outboxed.queued).toMatchObject({ name: 'queue', maxAttempts: 10 })
    })

    test("CAP's own model of cds.outbox.Messages has exactly the columns the plugin's keeps, with the same types", async () => {
      const theirs = cds.linked(await cds.load(require.resolve('@sap/cds/srv/outbox.cds'))).definitions['cds.outbox.Messages'].elements
      const ours = cds.model.definitions['cds.outbox.Messages'].elements
      for (const [name, element] of Object.entries(theirs)) {
        expect([name, ours[name]?.type, ours[name]?.length]).toEqual([name, element.type, element.length])
      }
    })
  })
})
