const { startApp, onPostgres } = require('../support/app')
const { startInstance, stopInstance, runOneOff } = require('../support/instances')
const { sideEffects, sideEffectsFile } = require('../support/faults')
const { MESSAGES } = require('../support/outbox')
const { waitFor } = require('../support/wait')
const cds = require('@sap/cds')

/**
 * Leases and due times are the database's time: an instance whose clock is wrong by 40 s neither takes over a message
 * another one runs, nor runs a delayed message early, nor writes a lease or a delay that others misread. This process
 * (the suite's app, its clock right) and two instances on the same database, one clock 40 s ahead, one 40 s behind
 * (only their `Date`, see test/support/skewed-clock.js). A `flush` makes a process claim whatever it finds due, so
 * each test looks at a claim made after the situation was set up.
 */
const QUEUE = { timeout: '30s', pollInterval: '200ms', shutdownGrace: '1s', backoff: { base: '60s' } }
const app = startApp({ requires: { queue: QUEUE } })

async function post(instance, path, body = {}) {
  const res = await fetch(instance.url + path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) })
  if (!res.ok) throw new Error(`POST ${path}: ${res.status} ${await res.text()}`)
  return res.json()
}

describe('leases and due times follow the database clock, whatever a process clock says', () => {
  const started = []
  let target, ahead, behind, aheadEffects, behindEffects
  /** The IDs of the messages this process's `record` handler ran, in order; `gate` holds those sent with `gated`. */
  const runs = []
  let open
  let gate

  beforeAll(async () => {
    target = await cds.connect.to('Target')
    target.on('record', async req => {
      runs.push(req.queue.messageId)
      if (req.data.gated) await gate
    })
    const database = onPostgres() ? app.database : { kind: 'sqlite', credentials: { url: app.dbFile } }
    aheadEffects = sideEffectsFile()
    behindEffects = sideEffectsFile()
    // the one behind runs a `record` with n = 0 for a minute (until it is stopped)
    ;[ahead, behind] = await Promise.all([
      startInstance(database, { name: 'ahead', queue: QUEUE, clockSkew: 40_000, env: { SIDE_EFFECTS: aheadEffects } }),
      startInstance(database, { name: 'behind', queue: QUEUE, clockSkew: -40_000, env: { SIDE_EFFECTS: behindEffects, SLOW_EVERY: '1000000', SLOW_MS: '60000' } })
    ])
    started.push(ahead, behind)
    // each has looked at the queue once: its runner has read the database's clock (before that, what a process
    // enqueues is stamped with its own clock; see README "PostgreSQL and multiple instances")
    await Promise.all([post(ahead, '/flush'), post(behind, '/flush')])
    // two app processes start on a loaded machine (four projects at once: over a minute seen on PostgreSQL)
  }, 180000)
  afterAll(async () => {
    open?.()
    await Promise.all(started.map(child => stopInstance(child)))
  })
  beforeEach(() => {
    gate = new Promise(resolve => (open = resolve))
  })
  afterEach(async () => {
    open?.()
    await DELETE.from(MESSAGES)
  })

  const ranElsewhere = ID => sideEffects(aheadEffects).has(ID) || sideEffects(behindEffects).has(ID)

  test('a message running here with timeout 30s is not taken over by an instance whose clock runs 40 s ahead', async () => {
    await cds.tx(() => cds.queued(target).emit('record', { gated: true }))
    const ID = await waitFor(() => runs[runs.length - 1], { timeout: 45000, what: 'the gated message to start here' })
    // its lease ends 30 s from now; to the instance ahead, that was 10 s ago
    await post(ahead, '/flush')
    expect(ranElsewhere(ID)).toBe(false)
    expect(await SELECT.one.from(MESSAGES).columns('status', 'attempts').where({ ID })).toEqual({ status: 'processing', attempts: 0 })
    open()
    await waitFor(async () => !(await SELECT.one.from(MESSAGES).where({ ID })), { timeout: 45000, what: 'the gated message to complete here' })
    expect(runs.filter(r => r === ID)).toHaveLength(1)
    expect(ranElsewhere(ID)).toBe(false)
  })

  test('an instance whose clock runs 40 s ahead does not run a message delayed by 30 s early', async () => {
    await cds.tx(() => target.schedule('record', { n: 1 }).after('30s').as('delayed'))
    await post(ahead, '/flush')
    const row = await SELECT.one.from(MESSAGES).columns('ID', 'status', 'attempts').where({ task: 'delayed' })
    expect(row).toMatchObject({ status: null, attempts: 0 })
    expect(ranElsewhere(row.ID)).toBe(false)
  })

  test('a delay written by an instance whose clock runs 40 s behind is not cut short', async () => {
    await post(behind, '/schedule', { n: 2, after: '30s', as: 'delayed-behind' })
    await cds.flush()
    const row = await SELECT.one.from(MESSAGES).columns('ID', 'status', 'attempts').where({ task: 'delayed-behind' })
    expect(row).toMatchObject({ status: null, attempts: 0 })
    expect(runs).not.toContain(row.ID)
    expect(ranElsewhere(row.ID)).toBe(false)
  })

  test('a retry written by an instance whose clock runs 40 s behind waits its backoff', async () => {
    // its first attempt fails there; the next is due 30 s later (backoff base 60 s, factor 1.5)
    await post(behind, '/enqueue', { from: 0, count: 1, event: 'unavailable' })
    const failed = await waitFor(async () => {
      const row = await SELECT.one.from(MESSAGES).columns('ID', 'status', 'attempts', 'lastError').where({ event: 'unavailable' })
      return row?.attempts >= 1 && row.status === null && row
    }, { timeout: 45000, what: 'the first attempt to fail' })
    // it failed in the instance behind, which wrote the retry's due time, and nobody has run it again since
    expect(failed).toMatchObject({ attempts: 1, lastError: expect.stringContaining('seen by instance behind') })
    await cds.flush()
    expect(await SELECT.one.from(MESSAGES).columns('ID', 'status', 'attempts', 'lastError').where({ ID: failed.ID })).toEqual(failed)
  })

  test('a message running in an instance whose clock runs 40 s behind is not taken over here', async () => {
    // its `record` with n = 0 runs for a minute, claimed at enqueue under a lease of 30 s
    await post(behind, '/enqueue', { from: 0, count: 1, event: 'record' })
    const ID = await waitFor(() => [...sideEffects(behindEffects).keys()][0], { timeout: 45000, what: 'the slow message to start in the instance behind' })
    await cds.flush()
    expect(runs).not.toContain(ID)
    expect(sideEffects(aheadEffects).has(ID)).toBe(false)
    const row = await SELECT.one.from(MESSAGES).columns('status', 'claimedBy').where({ ID })
    expect(row.status).toBe('processing')
    expect(row.claimedBy).toContain(`:${behind.pid}:`)
  })

  test('a script without a runner, its clock 40 s behind, stamps what it queues with the database\'s time', async () => {
    const database = onPostgres() ? app.database : { kind: 'sqlite', credentials: { url: app.dbFile } }
    // a queue only the script knows, of a remote service nobody answers for: it is the row that counts here
    const requires = { Ext: { kind: 'rest', credentials: { url: 'http://127.0.0.1:9' } } }
    const from = Date.now()
    await runOneOff(database, 'queue-ext', { requires, clockSkew: -40_000 })
    const until = Date.now()
    const { timestamp } = await SELECT.one.from(MESSAGES).columns('timestamp').where({ service: 'Ext' })
    // CAP's 7 fractional digits; the time this process's clock (the database's) had while the script ran
    const at = Date.parse(`${String(timestamp).slice(0, 23)}Z`)
    expect(at).toBeGreaterThanOrEqual(from - 1000)
    expect(at).toBeLessThanOrEqual(until + 1000)
  }, 60000)
})
