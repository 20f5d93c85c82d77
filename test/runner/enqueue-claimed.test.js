const { startApp } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES, messages } = require('../support/outbox')
const { monitor } = require('../support/monitor')
const cds = require('@sap/cds')

// Hourly polling and a long lease: whatever runs here was started by a commit, not by a timer or an expired lease.
startApp({ requires: { queue: { pollInterval: '1h', concurrency: 3, timeout: '1h' } } })

describe('messages claimed at enqueue (run right after commit, no claim pass)', () => {
  let srv, queued
  const runs = []
  beforeAll(async () => {
    srv = await cds.connect.to('Target')
    queued = cds.queued(srv)
    srv.on('note', req => runs.push(req.data.n))
  })
  afterEach(async () => {
    await cds.flush()
    await DELETE.from(MESSAGES)
    runs.length = 0
  })

  const stored = () => SELECT.from(MESSAGES).columns('ID', 'status', 'claimedBy', 'orderingKey').orderBy('timestamp')

  test("a 'succeeded' listener that throws before the queue's does not strand the committed message: it runs right away", async () => {
    let ID
    const ran = monitor().next('outcome', e => e.ID === ID && e.kind === 'succeeded', 5000)
    await expect(cds.tx(async () => {
      // registered first, so CAP calls it first; when it throws, CAP calls no further 'succeeded' listener and emits 'failed'
      cds.context.on('succeeded', () => { throw new Error('a listener of the app failed') })
      await queued.emit('note', { n: 'after-throwing-listener' })
      ID = (await stored())[0].ID
    })).rejects.toThrow('a listener of the app failed')
    // with an hour-long poll and lease, only the commit can have started it, within seconds
    await ran
    expect(runs).toEqual(['after-throwing-listener'])
  })

  test('twenty queued calls in one transaction add one pair of listeners to it, not one per call (no MaxListenersExceededWarning)', async () => {
    const warnings = []
    const onWarning = w => warnings.push(w.name)
    process.on('warning', onWarning)
    try {
      let listeners
      await cds.tx(async () => {
        for (let n = 0; n < 20; n++) await queued.emit('note', { n })
        listeners = ['succeeded', 'failed'].map(event => cds.context.emitter.listenerCount(event))
      })
      await cds.flush()
      await new Promise(resolve => setImmediate(resolve)) // warnings are emitted on the next tick
      expect(warnings).not.toContain('MaxListenersExceededWarning')
      // the transaction's own (commit, rollback) and the queue's: a handful, whatever the number of calls
      expect(Math.max(...listeners)).toBeLessThanOrEqual(4)
      expect(runs.sort((a, b) => a - b)).toEqual([...Array(20).keys()])
    } finally {
      process.off('warning', onWarning)
    }
  })

  test('while slots are free, a due message is written claimed by this process and runs after commit', async () => {
    const inTx = await cds.tx(async () => {
      await queued.emit('note', { n: 1 })
      return stored()
    })
    expect(inTx).toEqual([{ ID: expect.any(String), status: 'processing', claimedBy: expect.stringMatching(new RegExp(`:${process.pid}:[0-9a-f]{6}:enqueued$`)), orderingKey: null }])
    await waitFor(() => runs.length === 1, { what: 'the handler' })
    await waitFor(async () => (await messages()).length === 0, { what: 'the row deleted' })
    expect(runs).toEqual([1])
  })

  test('beyond the free slots, keyed and delayed messages are written unclaimed, and all of them run', async () => {
    const inTx = await cds.tx(async () => {
      for (let n = 0; n < 5; n++) await queued.emit('note', { n })
      await queued.emit('note', { n: 5 }, { 'x-ordering-key': 'k' })
      await queued.schedule('note', { n: 6 }).after('50ms')
      return stored()
    })
    // 3 slots: the first three are claimed at enqueue; the other two, the keyed and the delayed one wait for a claim.
    expect(inTx.map(r => r.status)).toEqual(['processing', 'processing', 'processing', null, null, null, null])
    await waitFor(() => runs.length === 7, { what: 'all seven messages' })
    expect(runs.sort()).toEqual([0, 1, 2, 3, 4, 5, 6])
  })

  test('a rollback leaves no message and gives the reserved slots back', async () => {
    await expect(
      cds.tx(async () => {
        for (let n = 0; n < 3; n++) await queued.emit('note', { n })
        throw new Error('business failure')
      })
    ).rejects.toThrow('business failure')
    expect(await messages()).toHaveLength(0)
    // Were the three slots still promised, these would be written unclaimed instead.
    const inTx = await cds.tx(async () => {
      for (let n = 10; n < 13; n++) await queued.emit('note', { n })
      return stored()
    })
    expect(inTx.map(r => r.status)).toEqual(['processing', 'processing', 'processing'])
    await waitFor(() => runs.length === 3, { what: 'the three messages' })
    expect(runs.sort()).toEqual([10, 11, 12])
  })

  // With hourly polling, only the runner's own wake-ups and timers can run these.
  test("a #succeeded callback of a message claimed at enqueue runs at once", async () => {
    const results = []
    srv.on('sum', req => req.data.a + req.data.b)
    srv.after('sum/#succeeded', data => void results.push(data))
    await cds.tx(() => queued.send('sum', { a: 1, b: 2 }))
    await waitFor(() => results.length === 1, { timeout: 5000, what: 'the #succeeded callback' })
    expect(results).toEqual([3])
  })

  test('a retry is run when due, also while another message claimed at enqueue was still running', async () => {
    const attempts = []
    srv.on('shaky', req => {
      attempts.push(req.queue.attempt)
      if (req.queue.attempt === 1) throw new Error('not yet')
    })
    srv.on('slowly', () => new Promise(resolve => setTimeout(resolve, 300)))
    // The failure's wake-up finds 'slowly' still running; its end must lead to the retry's timer.
    await cds.tx(async () => {
      await queued.emit('slowly', {})
      await queued.emit('shaky', {})
    })
    await waitFor(() => attempts.length === 2, { timeout: 8000, what: 'the second attempt' })
    expect(attempts).toEqual([1, 2])
  })
})
