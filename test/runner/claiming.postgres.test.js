const { startApp, onPortableStore } = require('../support/app')
const { withClient } = require('../support/postgres')
const { waitFor } = require('../support/wait')
const { MESSAGES } = require('../support/outbox')
const cds = require('@sap/cds')

// Polling only every hour: nothing is picked up unless the test enqueues through the API or calls cds.flush().
const test$ = startApp({ requires: { queue: { pollInterval: '1h' } } })

/** What PostgreSQL does with `statement` ({ sql, params }) when it runs, rolled back. */
const explain = statement => withClient(async client => {
  await client.query('BEGIN')
  const { rows } = await client.query(`EXPLAIN (ANALYZE, COSTS OFF) ${statement.sql}`, statement.params)
  await client.query('ROLLBACK')
  return rows.map(r => r['QUERY PLAN']).join('\n')
}, test$.database)

describe('postgres: claiming', () => {
  let srv, queued
  const query = (sql, params) => withClient(client => client.query(sql, params), test$.database)

  beforeAll(async () => {
    srv = await cds.connect.to('Target')
    queued = cds.queued(srv)
  })
  afterEach(() => DELETE.from(MESSAGES))

  test('a starting instance creates the index the claim query needs', async () => {
    // The runner starts on 'served' without holding up the app: its indexes may still be on their way.
    const indexed = async () => (await query(`SELECT indexdef FROM pg_indexes
      WHERE tablename = 'cds_outbox_messages' AND indexname = 'cds_outbox_messages_due'`)).rows
    const rows = await waitFor(async () => ((await indexed()).length ? indexed() : null), { what: 'the due-time index' })
    expect(rows).toEqual([{ indexdef: expect.stringContaining('(appid, dueat)') }])
  })

  test('the claim is committed before the handler runs, and no row lock is held while it runs', async () => {
    let entered, release
    const running = new Promise(resolve => (entered = resolve))
    const gate = new Promise(resolve => (release = resolve))
    srv.on('hold', async () => {
      entered()
      await gate
    })
    await cds.tx(() => queued.emit('hold'))
    await running
    // Another connection may lock the row at once (NOWAIT fails if any transaction holds a lock on it).
    const seen = await withClient(async client => {
      await client.query('BEGIN')
      const { rows } = await client.query(`SELECT status, claimedby FROM cds_outbox_messages FOR UPDATE NOWAIT`)
      await client.query('ROLLBACK')
      return rows
    }, test$.database)
    expect(seen).toEqual([{ status: 'processing', claimedby: expect.stringContaining(`:${process.pid}:`) }])
    release()
    await waitFor(async () => (await SELECT.from(MESSAGES)).length === 0, { what: 'the message to complete' })
  })

  // The portable store sends no notification (CQL has none): other instances find new messages by polling.
  const notifying = onPortableStore() ? test.skip : test

  notifying('the wake-up notification is delivered when the enqueuing transaction commits, never on rollback', async () => {
    await withClient(async client => {
      const received = []
      client.on('notification', n => received.push(n.channel))
      await client.query('LISTEN cds_event_queues')
      let beforeCommit
      // Keyed messages are always left to a claim, so other instances are told of them (an unkeyed one may be
      // written already claimed by this process, which then runs it without telling anyone).
      const keyed = { 'x-ordering-key': 'k' }
      await cds.tx(async () => {
        await queued.emit('greet', {}, keyed)
        await client.query('SELECT 1') // a round trip delivers whatever was already sent
        beforeCommit = received.length
      })
      expect(beforeCommit).toBe(0)
      await waitFor(() => received.length === 1, { what: 'the notification of the commit' })
      await expect(
        cds.tx(async () => {
          await queued.emit('greet', {}, keyed)
          throw new Error('business failure')
        })
      ).rejects.toThrow('business failure')
      await cds.tx(() => queued.emit('greet', {}, keyed))
      // Notifications arrive in commit order: once the last commit's has arrived, the rollback's would have too.
      await waitFor(() => received.length >= 2, { what: 'the notification of the second commit' })
      expect(received).toEqual(['cds_event_queues', 'cds_event_queues'])
    }, test$.database)
  })

  if (onPortableStore()) {
    test('the portable store notifies nobody: a commit sends no notification, other instances poll', async () => {
      await withClient(async client => {
        const received = []
        client.on('notification', n => received.push(n.payload))
        await client.query('LISTEN cds_event_queues')
        await cds.tx(() => queued.emit('greet', {}, { 'x-ordering-key': 'k' }))
        // Notifications arrive in commit order: once this later one has arrived, one of the enqueue would have too.
        await client.query("SELECT pg_notify('cds_event_queues', 'probe')")
        await waitFor(() => received.includes('probe'), { what: 'the probe notification' })
        expect(received).toEqual(['probe'])
      }, test$.database)
    })
  }

  test('with 100k dead letters and future messages in the table, claiming due messages uses the due-time index', async () => {
    await query(`INSERT INTO cds_outbox_messages (id, timestamp, target, msg, attempts, dueat)
      SELECT gen_random_uuid()::text, now(), 'queue', '{}', CASE WHEN i % 2 = 0 THEN 10 ELSE 0 END,
        CASE WHEN i % 2 = 0 THEN NULL ELSE now() + interval '1 day' END
      FROM generate_series(1, 100000) AS i`)
    // The runner's own claim statement (the one that orders), as it sends it to the database (nothing is due yet: it
    // claims nothing).
    // Read where it leaves the process: the store sends it on the transaction's own pg connection.
    let claim, resurrect, foreign
    const { Client } = require('pg')
    const send = Client.prototype.query
    Client.prototype.query = function (config, ...rest) {
      const text = typeof config?.text === 'string' ? config.text : ''
      // the same statements of either store: the native one's SQL, or CAP's from the portable one's CQL
      const flat = text.replace(/"?\$m"?\./g, '').replace(/[()]/g, '').toLowerCase()
      // (not the reconciliation's look for keyed rows to hold back, which orders and skips locked rows too)
      const parking = flat.includes("set dueat = '9999")
      const claiming = flat.includes("set status = 'processing'") || (flat.includes('skip locked') && flat.includes('order by') && !parking)
      if (claiming) claim ??= { sql: text, params: config.values }
      // the reconciliation's look for dead letters whose attempts are below their limit again
      if (flat.includes('dueat is null and status is null')) resurrect ??= { sql: text, params: config.values }
      if (flat.includes('status is not null and claimedby is null')) foreign ??= { sql: text, params: config.values }
      return send.call(this, config, ...rest)
    }
    try {
      await cds.flush()
    } finally {
      Client.prototype.query = send
    }
    expect(claim).toBeDefined()
    expect(resurrect).toBeDefined()
    // Due rows written without the API's notification: with hourly polling, the runner leaves them to the EXPLAIN.
    await query(`INSERT INTO cds_outbox_messages (id, timestamp, target, msg, attempts, dueat)
      SELECT gen_random_uuid()::text, now(), 'queue', '{}', 0, now() - interval '1 hour' FROM generate_series(1, 10)`)
    await query('ANALYZE cds_outbox_messages')
    const plan = await explain(claim)
    console.log(`claim of 10 due rows among 100k dead letters and future rows:\n${plan}`)
    expect(plan).toMatch(/rows=10/)
    expect(plan).toMatch(/Index (Only )?Scan (using|on) cds_outbox_messages_due/)
    expect(plan).not.toMatch(/Seq Scan on cds_outbox_messages/)
    // the reconciliation, once per poll: the 50k dead letters are not read one by one to find none to revive
    const sweep = await explain(resurrect)
    console.log(`reconciliation's look for revived dead letters among 50k dead letters:\n${sweep}`)
    expect(sweep).toMatch(/cds_outbox_messages_dead/)
    expect(sweep).not.toMatch(/Rows Removed by Filter: [1-9]\d{3,}/)
    const observe = await explain(foreign)
    console.log(`reconciliation's look for rows another runner holds, among 100k rows:\n${observe}`)
    expect(observe).toMatch(/cds_outbox_messages_foreign/)
    expect(observe).not.toMatch(/Seq Scan on cds_outbox_messages/)
  })

  // the native store's parking (the portable store keeps held-back rows in the claim's range, README, Databases)
  ;(onPortableStore() ? test.skip : test)('with 100k messages held back behind their key, neither claims nor the reconciliation read them one by one', async () => {
    await query('DELETE FROM cds_outbox_messages')
    // A key whose head waits for its retry, with 100k messages held back behind it; 10 unordered messages due.
    await query(`INSERT INTO cds_outbox_messages (id, timestamp, target, msg, attempts, dueat, orderingkey)
      VALUES (gen_random_uuid()::text, now() - interval '1 day', 'queue', '{}', 1, now() + interval '1 day', 'k')`)
    await query(`INSERT INTO cds_outbox_messages (id, timestamp, target, msg, attempts, dueat, orderingkey)
      SELECT gen_random_uuid()::text, now() - interval '1 hour' + i * interval '1 ms', 'queue', '{}', 0, '9999-12-31', 'k'
      FROM generate_series(1, 100000) AS i`)
    await query(`INSERT INTO cds_outbox_messages (id, timestamp, target, msg, attempts, dueat)
      SELECT gen_random_uuid()::text, now(), 'queue', '{}', 0, now() - interval '1 hour' FROM generate_series(1, 10)`)
    await query('ANALYZE cds_outbox_messages')
    const statements = []
    const { Client } = require('pg')
    const send = Client.prototype.query
    Client.prototype.query = function (config, ...rest) {
      const text = typeof config?.text === 'string' ? config.text : ''
      if (/SET status = 'processing'|SET dueAt = '9999|WITH RECURSIVE parked/.test(text)) statements.push({ sql: text, params: config.values })
      return send.call(this, config, ...rest)
    }
    const { runner } = require('../../lib/plugin').eventQueues()
    const store = runner.store
    try {
      await cds.tx(() => store.reconcile(require('../../lib/plugin').eventQueues().settings.queues.attemptLimits(), Date.now(), 60000))
      await cds.tx(() => store.park())
      await cds.tx(() => store.claim('explain', Date.now(), Date.now() + 60000, 0))
    } finally {
      Client.prototype.query = send
    }
    await query(`UPDATE cds_outbox_messages SET dueat = now() - interval '1 minute' WHERE attempts = 1`)
    await query('ANALYZE cds_outbox_messages')
    // the runner may claim meanwhile: the first statement of each kind
    const [park, walk, claim] = [/SET dueAt = '9999/, /WITH RECURSIVE parked/, /SET status = 'processing'/].map(kind => statements.find(s => kind.test(s.sql)))
    claim.params[claim.params.length - 2] = 10 // the claim's limit (the last parameter is its bound in bytes)
    for (const [what, statement] of [['claim', claim], ['look for keyed rows to hold back', park], ['walk over held-back keys', walk]]) {
      const plan = await explain(statement)
      console.log(`${what}, with 100k held-back messages:\n${plan}`)
      // what runs (a plan for a subquery that never runs may read anything)
      expect(plan).not.toMatch(/Seq Scan on cds_outbox_messages(?! \S+ \(never executed\))/)
      expect(plan).not.toMatch(/Rows Removed by Filter: [1-9]\d{2,}/)
      expect(plan).not.toMatch(/rows=[1-9]\d{3,}/)
    }
  })

  // A queue table is empty most of the time, so that is what autovacuum's ANALYZE sees; then a burst arrives. The
  // planner, told the table holds about no rows, may join the claimed IDs to the table row by row: each claim then
  // reads the whole backlog once per row it claims (measured: 0.8 s per claim of 500 rows among 3,000).
  ;(onPortableStore() ? test.skip : test)('a burst into a table last analyzed empty: the claim and the reconciliation find their rows by key, not once per row of the table', async () => {
    await query('ALTER TABLE cds_outbox_messages SET (autovacuum_enabled = false)')
    try {
      // emptied after messages ran: the table has pages, ANALYZE finds no row in them
      await query(`INSERT INTO cds_outbox_messages (id, timestamp, target, msg, attempts, dueat)
        SELECT gen_random_uuid()::text, now(), 'queue', '{}', 0, now() + interval '1 day' FROM generate_series(1, 200)`)
      await query('DELETE FROM cds_outbox_messages')
      await query('ANALYZE cds_outbox_messages')
      await query(`INSERT INTO cds_outbox_messages (id, timestamp, target, msg, attempts, dueat)
        SELECT gen_random_uuid()::text, now(), 'queue', '{}', 0, now() - interval '1 hour' FROM generate_series(1, 3000)`)
      const statements = []
      const { Client } = require('pg')
      const send = Client.prototype.query
      Client.prototype.query = function (config, ...rest) {
        const text = typeof config?.text === 'string' ? config.text : ''
        if (/^\s*UPDATE/.test(text)) statements.push({ sql: text, params: config.values })
        return send.call(this, config, ...rest)
      }
      const { runner, settings } = require('../../lib/plugin').eventQueues()
      try {
        await cds.tx(() => runner.store.reconcile(settings.queues.attemptLimits(), Date.now(), 60000))
        await cds.tx(() => runner.store.park())
        await cds.tx(() => runner.store.claim('explain', Date.now(), Date.now() + 60000, 0))
      } finally {
        Client.prototype.query = send
      }
      const claim = statements.find(s => /SET status = 'processing'/.test(s.sql))
      claim.params[claim.params.length - 2] = 500 // the claim's limit (the last parameter is its bound in bytes)
      const reconciliation = statements.filter(s => s !== claim && /^\s*UPDATE \S+ SET/.test(s.sql))
      expect(reconciliation.length).toBeGreaterThanOrEqual(5)
      for (const statement of [claim, ...reconciliation]) {
        const plan = await explain(statement)
        console.log(`${statement.sql.slice(0, 60).replace(/\s+/g, ' ')}…, 3,000 rows in a table analyzed empty:\n${plan}`)
        // one probe of the primary key per claimed row is the plan; anything else that runs per row of the table is not
        const perRow = plan.split('\n').filter(line => /loops=[1-9]\d{2,}/.test(line) && !/Index Scan using cds_outbox_messages_pkey/.test(line))
        expect(perRow).toEqual([])
        expect(plan).not.toMatch(/Rows Removed by Join Filter/)
      }
      const { rows: [{ n }] } = await query(`SELECT count(*)::int AS n FROM cds_outbox_messages WHERE claimedby IS NULL`)
      expect(n).toBe(3000)
    } finally {
      await query('ALTER TABLE cds_outbox_messages RESET (autovacuum_enabled)')
    }
  })

  test('instances starting at the same moment create the claim indexes once between them, and none of them fails', async () => {
    const { runner } = require('../../lib/plugin').eventQueues()
    const indexes = async () => (await query(`SELECT indexname FROM pg_indexes WHERE tablename = 'cds_outbox_messages' AND indexname <> 'cds_outbox_messages_pkey' ORDER BY 1`)).rows.map(r => r.indexname)
    const created = await indexes()
    expect(created).toHaveLength(10)
    for (const name of created) await query(`DROP INDEX ${name}`)
    // What runners starting side by side do: PostgreSQL fails all but one concurrent CREATE INDEX IF NOT EXISTS of
    // a name with a duplicate key, which used to leave those runners dead.
    await Promise.all([1, 2, 3, 4].map(() => runner.store.ensureIndexes()))
    expect(await indexes()).toEqual(created)
  })
})
