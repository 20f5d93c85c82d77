const { scrape, points } = require('../support/telemetry')
const { startApp, onPostgres } = require('../support/app')
const { MESSAGES, capRow } = require('../support/outbox')
const { waitFor } = require('../support/wait')
const { eventQueues } = require('../../lib/plugin')
const { Retention } = require('../../lib/ops/retention')
const cds = require('@sap/cds')

// Dead letters of the default queue go after a day; slowQueue keeps its own; OwnQueue's go after 2 s, so the
// cleanup runs every second in this suite (a tenth of the shortest retention, at least a second).
const app = startApp({
  requires: {
    queue: { deadLetterRetention: '1d' },
    slowQueue: { maxAttempts: 2, deadLetterRetention: false },
    OwnQueue: { impl: 'srv/plain-service.js', outboxed: { maxAttempts: 3, deadLetterRetention: '2s' } },
    // A dead head keeps its key blocked until an operator acts; its dead letters go after 1 s.
    Blocking: { impl: 'srv/plain-service.js', outboxed: { orderingKey: 'key', orderingOnDeadLetter: 'block', deadLetterRetention: '1s' } }
  },
  log: { levels: { queue: 'info' } }
})

const DAY = 86_400_000
const iso = ms => new Date(ms).toISOString()

/** A dead letter of `target` (CAP's recipe: attempts at maxAttempts; the plugin: not due) whose last attempt was `ago` ms ago. */
function deadLetter(target, ago, attempts = 10) {
  return { ...capRow({ event: 'expired', target }), service: 'Target', event: 'expired', attempts, dueAt: null, lastAttemptTimestamp: iso(Date.now() - ago) }
}

const remaining = async () => (await SELECT.from(MESSAGES).columns('ID')).map(r => r.ID).sort()

/** The dead letters the retention deleted of `queue` so far, as its metric counts them. */
async function deletedOf(queue) {
  const [point] = points(await scrape(), 'cds_event_queues.dead_letters.deleted', { 'messaging.destination.name': queue })
  return point?.value ?? 0
}

/** The cleanups' log lines while `fn` runs: the scheduled cleanup may run meanwhile, and its lines count as well. */
async function logged(fn) {
  const info = jest.spyOn(console, 'info')
  try {
    await fn()
    return info.mock.calls.map(args => args.join(' ')).filter(line => /dead letters past their queue's deadLetterRetention/.test(line))
  } finally {
    info.mockRestore()
  }
}

const deletedIn = lines => lines.reduce((sum, line) => sum + Number(line.match(/deleted (\d+) dead letters/)[1]), 0)

describe('dead-letter retention', () => {
  afterEach(() => DELETE.from(MESSAGES))

  test('dead letters past their queue\'s retention are deleted, logged and counted; younger ones, kept queues\' and retried messages stay', async () => {
    const before = await deletedOf('queue')
    const expired = deadLetter('queue', 2 * DAY)
    const withoutAttempt = { ...deadLetter('queue', 0), timestamp: iso(Date.now() - 2 * DAY), lastAttemptTimestamp: null }
    const young = { ...deadLetter('queue', 3_600_000), timestamp: iso(Date.now() - 3 * DAY) }
    const retried = { ...deadLetter('queue', 2 * DAY, 3), dueAt: iso(Date.now() + DAY) }
    const kept = deadLetter('slowQueue', 2 * DAY, 2)
    // the scheduled cleanup may come first: what either logs counts
    const lines = await logged(async () => {
      await INSERT.into(MESSAGES).entries([expired, withoutAttempt, young, retried, kept])
      await eventQueues().retention.run()
    })

    expect(await remaining()).toEqual([young.ID, retried.ID, kept.ID].sort())
    expect(deletedIn(lines)).toBe(2)
    expect(lines.join('\n')).toMatch(/queue: Target\.expired \d/)
    expect(await deletedOf('queue') - before).toBe(2)
  })

  test('a large backlog goes in batches of at most 500 rows, each its own statement, until none is left', async () => {
    const { runner } = eventQueues()
    const batches = []
    const original = runner.store.deleteExpiredDeadLetters.bind(runner.store)
    const deleting = jest.spyOn(runner.store, 'deleteExpiredDeadLetters').mockImplementation(async (...args) => {
      const deleted = await original(...args)
      if (deleted.length) batches.push(deleted.length)
      return deleted
    })
    const rows = Array.from({ length: 1200 }, () => deadLetter('queue', 2 * DAY))
    const lines = await logged(async () => {
      await INSERT.into(MESSAGES).entries(rows)
      await eventQueues().retention.run()
    })
    deleting.mockRestore()

    expect(await remaining()).toEqual([])
    expect(batches.reduce((a, b) => a + b, 0)).toBe(1200)
    expect(Math.max(...batches)).toBe(500)
    expect(batches.length).toBeGreaterThanOrEqual(3)
    expect(deletedIn(lines)).toBe(1200)
  })

  test('the cleanup runs on its schedule: a dead letter goes once it is older than its queue\'s retention', async () => {
    const row = deadLetter('OwnQueue', 0, 3)
    await INSERT.into(MESSAGES).entries(row)
    await waitFor(async () => (await remaining()).length === 0, { timeout: 10000, what: 'the scheduled cleanup to delete the dead letter' })
    // not before its 2 s counted from its last attempt (the cleanup runs every second: within a second after them)
    expect(Date.now() - Date.parse(row.lastAttemptTimestamp)).toBeGreaterThanOrEqual(2000)
  })

  test("a dead letter that blocks its ordering key ('block') outlives its retention, and its key stays blocked; the queue's other dead letters go", async () => {
    const blocking = await cds.connect.to('Blocking')
    const seen = []
    cds.unqueued(blocking).on('ship', req => {
      if (req.data.fails) throw Object.assign(new Error('carrier down'), { unrecoverable: true })
      seen.push(req.data.seq)
    })
    const deadLetters = async () => (await SELECT.from(MESSAGES).columns('ID', 'orderingKey').where({ dueAt: null })).map(r => r.ID)
    await cds.tx(async () => {
      await blocking.emit('ship', { key: 'order-1', seq: 0, fails: true })
      await blocking.emit('ship', { key: 'order-1', seq: 1 })
    })
    const [head] = await waitFor(() => deadLetters().then(IDs => IDs.length === 1 && IDs), { what: 'the dead head' })
    // an unkeyed dead letter of the same queue, dead after the head: once the scheduled cleanup deleted it, the
    // head was past its retention as well
    await cds.tx(() => blocking.emit('ship', { seq: 2, fails: true }))
    const [unkeyed] = await waitFor(() => deadLetters().then(IDs => IDs.length === 2 && IDs.filter(ID => ID !== head)), { what: 'the unkeyed dead letter' })
    await waitFor(async () => !(await remaining()).includes(unkeyed), { what: 'the cleanup to delete the unkeyed dead letter' })
    await eventQueues().retention.run()
    await cds.flush()

    const rows = await SELECT.from(MESSAGES).columns('ID', 'orderingKey', 'attempts').orderBy('timestamp')
    expect(rows).toEqual([{ ID: head, orderingKey: 'order-1', attempts: expect.any(Number) }, { ID: expect.any(String), orderingKey: 'order-1', attempts: 0 }])
    expect(seen).toEqual([])
  })

  // Last: it stops the scheduled cleanup, so that only the two it runs delete.
  const onPg = onPostgres() ? test : test.skip
  onPg('two instances cleaning up at once never wait for each other, nor for rows another transaction holds (PostgreSQL)', async () => {
    const { withClient } = require('../support/postgres')
    const { settings, runner, retention } = eventQueues()
    await retention.stop()
    const instance = () => new Retention(settings.queues, () => runner.store, () => [undefined], (tenant, fn) => cds.tx({ tenant }, fn))
    const [one, two] = [instance(), instance()]
    const before = await deletedOf('queue')
    const rows = Array.from({ length: 2000 }, () => deadLetter('queue', 2 * DAY))
    await INSERT.into(MESSAGES).entries(rows)
    const held = rows.slice(0, 10).map(r => r.ID).sort()

    await withClient(async client => {
      // an operator's revive in progress holds these rows
      await client.query('BEGIN')
      await client.query('SELECT ID FROM cds_outbox_Messages WHERE ID = ANY($1) FOR UPDATE', [held])
      try {
        // both finish while the lock is still held: neither waited for it, nor for the other
        await Promise.all([one.run(), two.run()])
        expect(await remaining()).toEqual(held)
      } finally {
        await client.query('ROLLBACK')
      }
    }, app.database)

    expect(await deletedOf('queue') - before).toBe(1990)
    await one.run()
    expect(await remaining()).toEqual([])
  })
})
