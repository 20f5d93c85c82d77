const { startApp } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES, messages, millis, capRow } = require('../support/outbox')
const { monitor } = require('../support/monitor')
const cds = require('@sap/cds')

startApp({ requires: { queue: { pollInterval: '200ms', backoff: { base: 10, max: 50 } } } })

describe('claims and leases', () => {
  let srv, queued
  const runs = []
  beforeAll(async () => {
    srv = await cds.connect.to('Target')
    queued = cds.queued(srv)
    srv.on('record', req => void runs.push({ tag: req.data.tag, attempt: req.queue.attempt, at: Date.now() }))
  })
  afterEach(() => DELETE.from(MESSAGES))

  test('rows written by another process are picked up by polling, without any wake-up', async () => {
    // A plain INSERT on the table is what another instance's enqueue looks like to this process.
    await INSERT.into(MESSAGES).entries(capRow({ event: 'record', data: { tag: 'polled' } }))
    await waitFor(() => runs.find(r => r.tag === 'polled'), { timeout: 5000, what: 'the poll to pick up the row' })
  })

  test('a claim records who holds the message and since when, while its handler runs', async () => {
    let release, seenRow
    const blocked = new Promise(resolve => (release = resolve))
    srv.on('held', () => blocked)
    const before = Date.now()
    await cds.tx(() => queued.emit('held', {}))
    seenRow = await waitFor(async () => {
      const [row] = await messages()
      return row?.status === 'processing' && row
    }, { what: 'the claim' })
    release()
    expect(seenRow.claimedBy).toMatch(new RegExp(`:${process.pid}:`))
    expect(millis(seenRow.claimedAt)).toBeGreaterThanOrEqual(before - 5)
    // the lease: `timeout` ('1h'); claimed at enqueue, 30 s until the handler has run for 15 s, then renewed to `timeout`
    const lease = seenRow.claimedBy.endsWith(':enqueued') ? 30_000 : 3_600_000
    expect(millis(seenRow.dueAt)).toBe(millis(seenRow.claimedAt) + lease)
    await waitFor(async () => (await messages()).length === 0, { what: 'completion' })
  })

  test.each([[0, 0], [2, 0], [2, 1]])(
    'a row left in processing by a crashed process (%i earlier attempts, interrupted %i times before) is reclaimed when its lease expires, not before',
    async (previous, interrupted) => {
      const lease = 1200
      const row = {
        ...capRow({ event: 'record', data: { tag: `crashed-${previous}-${interrupted}` } }),
        status: 'processing', attempts: previous, interrupted, claimedBy: 'crashed-host:1:000000',
        claimedAt: new Date(Date.now() - 5000).toISOString(), dueAt: new Date(Date.now() + lease).toISOString()
      }
      const reclaimed = monitor().next('outcome', e => e.ID === row.ID && e.kind === 'succeeded', 5000)
      await INSERT.into(MESSAGES).entries(row)
      await reclaimed
      const run = runs.find(r => r.tag === `crashed-${previous}-${interrupted}`)
      // not before the lease expired
      expect(run.at).toBeGreaterThanOrEqual(Date.parse(row.dueAt))
      // a first interruption is free (the message may never have started: a batch's rest, a claim at enqueue);
      // after that the message runs alone right after its claim, so a lost claim was a started attempt and counts
      expect(run.attempt).toBe(previous + 1 + (interrupted > 0 ? 1 : 0))
    }
  )

  test('a message that keeps killing its process still ends as a dead letter: every expired lease after the first counts', async () => {
    const row = {
      ...capRow({ event: 'record', data: { tag: 'killer' } }),
      status: 'processing', attempts: 9, interrupted: 1, claimedBy: 'crashed-host:1:000000',
      claimedAt: new Date(Date.now() - 5000).toISOString(), dueAt: new Date(Date.now() - 1).toISOString()
    }
    await INSERT.into(MESSAGES).entries(row)
    await cds.flush()
    const [dead] = await messages()
    expect(dead).toMatchObject({ attempts: 10, dueAt: null })
    expect(dead.lastError).toContain('crashed-host:1:000000')
    expect(runs.find(r => r.tag === 'killer')).toBeUndefined()
  })
})
