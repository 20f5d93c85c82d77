const { startApp, newDatabaseFile, onPostgres } = require('../support/app')
const { startInstance, stopInstance } = require('../support/instances')
const { waitFor } = require('../support/wait')
const { MESSAGES } = require('../support/outbox')
const cds = require('@sap/cds')

/**
 * The ops page's backend over HTTP: its files (the browser suite drives the page itself) and the lag history it
 * samples, on both databases. Retries wait an hour, so a failed message stays pending and its lag grows.
 */
const { OPERATOR_USERS: USERS } = require('../support/operators')
const app = startApp({
  requires: {
    auth: { kind: 'mocked', users: USERS },
    queue: { backoff: { base: '1h' } },
    'dead-letter-queue': { lagSampleInterval: '200ms' }
  },
  log: { levels: { odata: 'warn', error: 'silent' } }
})
const as = user => ({ auth: user && { username: user, password: USERS[user].password }, validateStatus: () => true, maxRedirects: 0 })

describe('the ops page backend', () => {
  test('serves its three files to operators only, with a policy that allows nothing from elsewhere', async () => {
    for (const [file, type] of [['', 'text/html'], ['index.html', 'text/html'], ['page.js', 'text/javascript'], ['page.css', 'text/css']]) {
      const res = await app.axios.get(`/event-queues/${file}`, as('ops'))
      expect([file, res.status, res.headers['content-type']]).toEqual([file, 200, `${type}; charset=utf-8`])
      expect(res.headers['content-security-policy']).toMatch(/^default-src 'none'; script-src 'self'; style-src 'self';.* connect-src 'self'/)
      expect((await app.axios.get(`/event-queues/${file}`, as())).status).toBe(401)
      expect((await app.axios.get(`/event-queues/${file}`, as('clerk'))).status).toBe(403)
    }
    const html = (await app.axios.get('/event-queues/', as('ops'))).data
    // only relative references: nothing the browser would fetch from a CDN
    expect([...html.matchAll(/(?:src|href)="([^"]+)"/g)].map(m => m[1])).toEqual(['page.css', 'page.js'])
    expect((await app.axios.get('/event-queues/other.js', as('ops'))).status).toBe(404)
    const bare = await app.axios.get('/event-queues', as('ops'))
    expect([bare.status, bare.headers.location]).toEqual([301, '/event-queues/'])
  })

  test('lagHistory() returns the sampled statistics per queue, oldest first, ending with a sample taken now', async () => {
    const target = await cds.connect.to('Target')
    target.on('flaky', () => {
      throw new Error('the flights system is down')
    })
    await cds.tx(() => cds.queued(target).emit('flaky', {}))
    const [flaky] = await SELECT.from(MESSAGES)
    await waitFor(async () => (await SELECT.one.from(MESSAGES).where({ ID: flaky.ID })).attempts === 1, { what: 'the first attempt to fail' })
    const enqueued = Date.parse(flaky.timestamp)

    // samples until the message has waited 2 s, five of them at least (a loaded machine takes fewer in that time): the
    // lag must have grown across them; read while the message waits for its retry (it is retried meanwhile)
    const { res, asked, samples } = await waitFor(async () => {
      if (Date.now() - enqueued <= 2100) return false
      const asked = Date.now()
      const res = await app.axios.get('/odata/v4/event-queues/lagHistory()', as('ops'))
      const samples = res.status === 200 ? res.data.value.filter(s => s.queue === 'queue') : []
      return (res.status !== 200 || (samples.length >= 5 && samples.at(-1).processing === 0)) && { res, asked, samples }
    }, { timeout: 30000, what: 'five samples over two seconds of lag', interval: 100 })
    expect(res.status).toBe(200)
    expect(samples.length).toBeGreaterThanOrEqual(5)
    const times = samples.map(s => Date.parse(s.at))
    expect(times).toEqual([...times].sort((a, b) => a - b))
    expect(times.at(-1)).toBeGreaterThanOrEqual(asked - 5)
    const last = samples.at(-1)
    expect(last).toMatchObject({ pending: 1, processing: 0, dead: 0 })
    expect(last.relayLag).toBe(Math.floor((times.at(-1) - enqueued) / 1000))
    // grown across them: the first sample in the message's first second is not certain on a loaded machine (CI's
    // .ci/run once took the first one 1 s after the commit), a smaller lag before the last one is
    expect(Math.min(...samples.map(s => s.relayLag))).toBeLessThan(last.relayLag)
    expect(Math.max(...samples.map(s => s.relayLag))).toBe(last.relayLag)

    expect((await app.axios.get('/odata/v4/event-queues/lagHistory()', as())).status).toBe(401)
    expect((await app.axios.get('/odata/v4/event-queues/lagHistory()', as('clerk'))).status).toBe(403)
  })
})

describe('the lag history', () => {
  const { LagHistory, HISTORY_WINDOW } = require('../../lib/ops/lag-history')

  test('keeps one hour, adds counts of a queue over its services and events, and gives an emptied queue a zero point', async () => {
    let now = Date.parse('2026-01-01T10:00:00Z')
    let counts = [
      { queue: 'queue', pending: 2, processing: 1, dead: 0, relayLag: 30 },
      { queue: 'queue', pending: 1, processing: 0, dead: 4, relayLag: 90 },
      { queue: 'flights', pending: 1, processing: 0, dead: 0, relayLag: 5 }
    ]
    const history = new LagHistory(async () => counts, 1000, () => now)
    await history.sample()
    now += HISTORY_WINDOW / 2
    counts = [{ queue: 'queue', pending: 0, processing: 0, dead: 4, relayLag: 0 }]
    expect(await history.history()).toEqual([
      { at: '2026-01-01T10:00:00.000Z', queue: 'queue', pending: 3, processing: 1, dead: 4, relayLag: 90 },
      { at: '2026-01-01T10:00:00.000Z', queue: 'flights', pending: 1, processing: 0, dead: 0, relayLag: 5 },
      { at: '2026-01-01T10:30:00.000Z', queue: 'queue', pending: 0, processing: 0, dead: 4, relayLag: 0 },
      { at: '2026-01-01T10:30:00.000Z', queue: 'flights', pending: 0, processing: 0, dead: 0, relayLag: 0 }
    ])
    now += HISTORY_WINDOW / 2 + 1
    expect((await history.history()).map(s => [s.at, s.queue])).toEqual([
      ['2026-01-01T10:30:00.000Z', 'queue'],
      ['2026-01-01T10:30:00.000Z', 'flights'],
      ['2026-01-01T11:00:00.001Z', 'queue'],
      ['2026-01-01T11:00:00.001Z', 'flights']
    ])
  })

  test('a point is stamped with the moment its lag was counted at, however long the count takes', async () => {
    const enqueued = Date.parse('2026-01-01T10:00:00.900Z')
    let now = enqueued + 1000
    // the count takes 200 ms: stamped with its end, the point would say 1 s of lag at 10:00:02.100
    const history = new LagHistory(async at => {
      now += 200
      return [{ queue: 'queue', pending: 1, processing: 0, dead: 0, relayLag: Math.floor((at - enqueued) / 1000) }]
    }, 1000, () => now)
    const [point] = await history.history()
    expect(point.relayLag).toBe(Math.floor((Date.parse(point.at) - enqueued) / 1000))
  })

  test('history() ends with a sample counted after it was asked, also while a sample begun before is still counting', async () => {
    let now = Date.parse('2026-01-01T10:00:00.000Z')
    const pending = []
    const history = new LagHistory(
      at => new Promise(resolve => pending.push(() => resolve([{ queue: 'queue', pending: 1, processing: 0, dead: 0, relayLag: at }]))),
      1000,
      () => now
    )
    const timerSample = history.sample() // the sampler's own sample, begun at 10:00:00.000
    now += 69
    const asked = now
    const answer = history.history()
    // release each count as it is asked for, until the answer is there
    let done = false
    answer.then(() => (done = true))
    while (!done) {
      await new Promise(resolve => setImmediate(resolve))
      pending.shift()?.()
    }
    await timerSample
    const samples = await answer
    expect(Date.parse(samples.at(-1).at)).toBeGreaterThanOrEqual(asked)
  })

  test('stop waits for the sample in progress and takes no more, so the database can disconnect', async () => {
    let release
    let calls = 0
    const history = new LagHistory(() => {
      calls++
      return new Promise(resolve => (release = () => resolve([{ queue: 'queue', pending: 1, processing: 0, dead: 0, relayLag: 1 }])))
    }, 1000)
    const running = history.sample()
    let stopped = false
    const stopping = history.stop().then(() => (stopped = true))
    await Promise.resolve()
    expect(stopped).toBe(false)
    release()
    await Promise.all([running, stopping])
    expect(stopped).toBe(true)
    await history.sample()
    history.start()
    expect(calls).toBe(1)
    expect((await history.history()).map(s => s.relayLag)).toEqual([1])
    expect(calls).toBe(1)
  })

  test('per tenant (a multitenant app): each tenant has its own history, sampled when asked, and is forgotten after an hour unasked', async () => {
    const { TenantLagHistories } = require('../../lib/ops/lag-history')
    let now = Date.parse('2026-01-01T10:00:00Z')
    const counted = []
    const histories = new TenantLagHistories(async (tenant, at) => {
      counted.push(tenant)
      return [{ queue: `queue-of-${tenant}`, pending: 1, processing: 0, dead: 0, relayLag: (at - Date.parse('2026-01-01T10:00:00Z')) / 1000 }]
    }, 1000, () => now)
    expect((await histories.history('t1')).map(s => s.queue)).toEqual(['queue-of-t1'])
    expect((await histories.history('t2')).map(s => s.queue)).toEqual(['queue-of-t2'])
    now += 1000
    expect((await histories.history('t1')).map(s => [s.queue, s.relayLag])).toEqual([['queue-of-t1', 0], ['queue-of-t1', 1]])
    expect(counted).toEqual(['t1', 't2', 't1'])
    // t2 unasked for more than the window: its samples are gone with it; t1 keeps those of the last hour
    now += HISTORY_WINDOW
    expect((await histories.history('t2')).map(s => s.relayLag)).toEqual([3601])
    await histories.stop()
    expect(await histories.history('t1')).toEqual([])
  })

  test('a sample the database refuses costs that point only', async () => {
    let failing = true
    const history = new LagHistory(async () => {
      if (failing) throw new Error('connection refused')
      return [{ queue: 'queue', pending: 1, processing: 0, dead: 0, relayLag: 3 }]
    }, 1000)
    expect(await history.history()).toEqual([])
    failing = false
    expect((await history.history()).map(s => s.relayLag)).toEqual([3])
  })
})

describe('the ops page in a served app', () => {
  let instance
  afterAll(() => stopInstance(instance))

  test('one info line at start says where the page is and who may open it', async () => {
    let database = { kind: 'sqlite', credentials: { url: newDatabaseFile() } }
    if (onPostgres()) {
      const postgres = require('../support/postgres')
      database = postgres.newDatabaseName()
      await postgres.createDatabase(database)
    }
    instance = await startInstance(database, { name: 'page', deploy: true, env: { CDS_LOG_LEVELS_QUEUE: 'info' } })
    await waitFor(() => /\[queue\] - ops page/.test(instance.output), { what: 'the ops page line' })
    const lines = instance.output.split('\n').filter(line => line.startsWith('[queue] - ops page'))
    expect(lines).toEqual([`[queue] - ops page: ${instance.url}/event-queues/ (users with role internal-user)`])
  })
})
