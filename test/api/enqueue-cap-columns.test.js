const { startApp } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES, millis } = require('../support/outbox')
const { monitor } = require('../support/monitor')
const cds = require('@sap/cds')

// The documented defaults (timeout 1 h, maxAttempts 10), and a queue whose timeout is 30 s.
startApp({ requires: { Short: { impl: 'srv/plain-service.js', outboxed: { timeout: '30s' } } } })

const HOUR = 3_600_000
const iso = ms => new Date(ms).toISOString()

// SPEC §0: CAP's columns decide, whoever wrote them and when — also the enqueuing transaction itself, after a
// message due now was written claimed at enqueue to run right after the commit.
describe("CAP's columns written in the enqueuing transaction decide over the claim at enqueue", () => {
  let target, short
  const runs = []
  beforeAll(async () => {
    target = await cds.connect.to('Target')
    short = await cds.connect.to('Short')
    for (const srv of [target, short]) srv.on('held', req => void runs.push({ at: Date.now(), attempt: req.queue.attempt }))
  })
  afterEach(async () => {
    await DELETE.from(MESSAGES)
    runs.length = 0
  })

  /** Enqueues `event` due now on `srv` and writes `columns` into its row in the same transaction; the row's ID. */
  function enqueueAndWrite(srv, event, columns) {
    return cds.tx(async () => {
      await cds.queued(srv).emit(event, {})
      const [{ ID, status }] = await SELECT.from(MESSAGES).columns('ID', 'status')
      expect(status).toBe('processing') // claimed at enqueue, the case at hand
      await UPDATE(MESSAGES).set(columns).where({ ID })
      return ID
    })
  }

  test("a message another runner holds (status 'processing', its last attempt 50 min ago, timeout 1 h) does not run after the commit; it is taken over when that lease ends", async () => {
    const lastAttempt = Date.now() - 50 * 60_000
    const ID = await enqueueAndWrite(target, 'held', { status: 'processing', lastAttemptTimestamp: iso(lastAttempt) })
    await cds.flush()

    expect(runs).toEqual([])
    const row = await SELECT.one.from(MESSAGES).columns('status', 'attempts', 'lastAttemptTimestamp', 'dueAt').where({ ID })
    expect(row).toMatchObject({ status: 'processing', attempts: 0 })
    expect(millis(row.lastAttemptTimestamp)).toBe(lastAttempt)
    // the plugin may take it over in 10 minutes, as CAP's runner would
    expect(millis(row.dueAt)).toBe(lastAttempt + HOUR)
  })

  test("a message another runner holds (its last attempt 2 s ago, timeout 30 s) runs when that runner's lease has expired, not before", async () => {
    const lastAttempt = Date.now() - 2000
    const ID = await enqueueAndWrite(short, 'held', { status: 'processing', lastAttemptTimestamp: iso(lastAttempt) })
    await cds.flush()
    expect(runs).toEqual([])

    await waitFor(() => runs.length === 1, { timeout: 90000, what: 'the takeover once the lease expired' })
    expect(runs[0].at).toBeGreaterThanOrEqual(lastAttempt + 30_000)
    await waitFor(async () => !(await SELECT.one.from(MESSAGES).where({ ID })), { what: 'the row deleted' })
  }, 120000)

  test('a message whose attempts were set to 9 runs its 10th attempt, and failing it becomes a dead letter', async () => {
    const attempts = []
    target.on('counted', req => {
      attempts.push(req.queue.attempt)
      throw new Error('still failing')
    })
    let ID
    const outcome = monitor().next('outcome', e => e.ID === ID, 30000)
    ID = await enqueueAndWrite(target, 'counted', { attempts: 9 })
    expect((await outcome).kind).toBe('dead')

    expect(attempts).toEqual([10])
    const row = await SELECT.one.from(MESSAGES).columns('attempts', 'lastError', 'status').where({ ID })
    expect(row).toMatchObject({ attempts: 10, status: null })
    expect(row.lastError).toMatch(/still failing/)
  })
})
