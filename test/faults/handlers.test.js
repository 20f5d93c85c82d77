const { startApp } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES, millis } = require('../support/outbox')
const cds = require('@sap/cds')

startApp({ requires: { queue: { pollInterval: '200ms' } } })

/** Resolves after `ms`, or rejects with the signal's reason when it aborts first. */
const pause = (ms, signal) => new Promise((resolve, reject) => {
  const timer = setTimeout(resolve, ms)
  signal.addEventListener('abort', () => (clearTimeout(timer), reject(signal.reason)), { once: true })
})

describe('faults: stuck and slow handlers', () => {
  afterEach(() => DELETE.from(MESSAGES))

  test('a handler that never resolves blocks nothing; after handlerTimeout its signal aborts and, once its lease expires, it is reclaimed', async () => {
    const plain = cds.unqueued(await cds.connect.to('Plain'))
    const queued = cds.queued(plain, { timeout: '1s', handlerTimeout: '2s' })
    const attempts = []
    const quick = []
    plain.on('hang', req => {
      attempts.push(req.queue)
      if (req.queue.attempt === 1) return new Promise(() => {}) // never settles
    })
    plain.on('quick', req => void quick.push(req.data.n))
    await cds.tx(async () => {
      await queued.emit('hang', {})
      for (let n = 0; n < 20; n++) await queued.emit('quick', { n })
    })
    await waitFor(() => quick.length === 20, { what: 'the other messages' })
    expect(attempts).toHaveLength(1)
    expect(attempts[0].signal.aborted).toBe(false)
    await waitFor(() => attempts.length === 2, { timeout: 15000, what: 'the reclaim of the stuck message' })
    expect(attempts[0].signal.aborted).toBe(true)
    expect(attempts[0].signal.reason.code).toBe('HANDLER_TIMEOUT')
    expect(attempts[1].attempt).toBe(2) // the abandoned attempt counts
    expect(attempts[1].messageId).toBe(attempts[0].messageId)
    await waitFor(async () => (await SELECT.from(MESSAGES)).length === 0, { what: 'completion of the second attempt' })
  })

  test("a handler abandoned after handlerTimeout as the shutdown's grace period ends keeps its attempt: the shutdown does not hand it back uncharged", async () => {
    // chaos seed 1576283944: the handler timed out 60 ms before the grace period ended, while its slot was still
    // abandoning it; the shutdown took it for a running handler and released its row, and the next attempt was 1 again
    const { runner } = require('../../lib/plugin').eventQueues()
    const plain = cds.unqueued(await cds.connect.to('Plain'))
    const queued = cds.queued(plain, { timeout: '1s', handlerTimeout: '1s' })
    const attempts = []
    let handBack
    plain.on('stuck', req => {
      attempts.push(req.queue.attempt)
      if (req.queue.attempt > 1) return
      // the grace period ends at the very moment the handler times out (before its slot has abandoned it)
      req.queue.signal.addEventListener('abort', () => (handBack = runner.holdings.handBackRunning(0)), { once: true })
      return new Promise(() => {})
    })
    await cds.tx(() => queued.emit('stuck', {}))
    await waitFor(() => handBack !== undefined, { what: 'the handler timeout' })
    await handBack
    await waitFor(() => attempts.length === 2, { timeout: 15000, what: 'the takeover of the abandoned message' })
    expect(attempts).toEqual([1, 2])
    await waitFor(async () => (await SELECT.from(MESSAGES)).length === 0, { what: 'completion of the second attempt' })
  })

  test('a handler running 3.5 times its lease keeps its claim through renewal and runs exactly once', async () => {
    const srv = cds.unqueued(await cds.connect.to('NotQueued'))
    const queued = cds.queued(srv, { timeout: '1s' })
    const runs = []
    srv.on('long', async req => {
      runs.push(req.queue)
      await pause(3500, req.queue.signal)
      await INSERT.into('test.Records').entries({ ID: cds.utils.uuid(), kind: 'long', message: req.queue.messageId })
    })
    await cds.tx(() => queued.emit('long', {}))
    const first = await waitFor(async () => (await SELECT.one.from(MESSAGES).where({ status: 'processing' })), { what: 'the claim' })
    // the queue's lease is 1 s from the claim; a renewed one reaches further (and not to the default queue's 1 h)
    const renewed = await waitFor(async () => {
      const row = await SELECT.one.from(MESSAGES).where({ ID: first.ID })
      const lease = row && millis(row.dueAt) - millis(row.claimedAt)
      return lease > 1000 && lease < 60000 && row
    }, { what: 'a renewed lease' })
    expect(renewed.claimedBy).toBe(first.claimedBy)
    await waitFor(async () => (await SELECT.from(MESSAGES)).length === 0, { what: 'completion' })
    expect(runs).toHaveLength(1)
    expect(runs[0].signal.aborted).toBe(false)
    expect(await SELECT.from('test.Records').where({ kind: 'long' })).toHaveLength(1)
  })

  test('when its claim is taken over while it runs, the handler\'s signal aborts and its writes roll back', async () => {
    const srv = cds.unqueued(await cds.connect.to('Target'))
    const queued = cds.queued(srv, { timeout: '900ms' })
    let seen
    srv.on('lost', async req => {
      seen = req.queue
      await pause(10000, req.queue.signal).catch(() => {}) // reacts to the abort by finishing its work
      await INSERT.into('test.Records').entries({ ID: cds.utils.uuid(), kind: 'lost', message: req.queue.messageId })
    })
    await cds.tx(() => queued.emit('lost', {}))
    const claimed = await waitFor(async () => seen && (await SELECT.one.from(MESSAGES).where({ status: 'processing' })), { what: 'the claim' })
    // another process takes the message over (as after an expired lease), with a lease of its own
    await UPDATE(MESSAGES, claimed.ID).with({ claimedBy: 'thief:1:000000', claimedAt: new Date().toISOString(), dueAt: new Date(Date.now() + 3600000).toISOString() })
    await waitFor(() => seen.signal.aborted, { what: 'the abort on lease loss' })
    expect(seen.signal.reason.code).toBe('LEASE_LOST')
    await waitFor(async () => (await SELECT.one.from(MESSAGES).where({ ID: claimed.ID }))?.claimedBy === 'thief:1:000000', { what: 'the row' })
    expect(await SELECT.from('test.Records').where({ kind: 'lost' })).toHaveLength(0)
  })
})
