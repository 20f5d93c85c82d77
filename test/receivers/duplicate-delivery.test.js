const { startApp } = require('../support/app')
const { MESSAGES, messages } = require('../support/outbox')
const { monitor } = require('../support/monitor')
const cds = require('@sap/cds')

// The duplicate-delivery test mode (README, Testing: deliver: 'twice'): every message is delivered a second time once
// its first delivery committed, so an app's own tests show whether its handlers are idempotent. Inbound messages of an
// inboxed service are received a second time, as a broker redelivers them. `inboxCopies` keeps no record of the IDs it
// received, so its subscriber sees the copy.
startApp({
  requires: {
    queue: { deliver: 'twice', pollInterval: '1h', backoff: { base: 10, max: 50 } },
    inboxCopies: { kind: 'local-messaging', inboxed: { messageId: false }, outboxed: false }
  }
})

const RECORDS = 'test.Records'
const records = kind => SELECT.from(RECORDS).where({ kind })
const testkit = require('../../test.js')

/** What `cds.log('queue')` logs at `level` while `fn` runs, as lines as a console prints them (util.format). */
async function logged(level, fn) {
  const LOG = cds.log('queue')
  cds.log('queue', level)
  const lines = []
  const spy = jest.spyOn(LOG, level).mockImplementation((...args) => void lines.push(require('util').format(...args)))
  try {
    await fn()
  } finally {
    spy.mockRestore()
    cds.log('queue', 'silent')
  }
  return lines
}

describe("duplicate-delivery test mode (cds.requires.queue.deliver: 'twice')", () => {
  let target, queued
  beforeAll(async () => {
    target = await cds.connect.to('Target')
    queued = cds.queued(target)
  })
  afterEach(async () => {
    await cds.flush()
    await DELETE.from(MESSAGES)
    await DELETE.from(RECORDS)
  })

  test('a message is delivered a second time after its first delivery committed, in a transaction of its own, with the same message ID', async () => {
    const deliveries = []
    target.on('note', async req => {
      // what this delivery sees of the other's write: the second one sees the first's, committed
      const seen = (await records('note')).length
      deliveries.push({ messageId: req.queue.messageId, seen, tx: cds.context.tx, data: req.data })
      await INSERT.into(RECORDS).entries({ ID: cds.utils.uuid(), kind: 'note', message: req.data.text })
    })
    await cds.tx(() => queued.emit('note', { text: 'hello' }))
    await cds.flush()
    expect(deliveries).toHaveLength(2)
    const [first, second] = deliveries
    expect(second.messageId).toBe(first.messageId)
    expect(second.data).toEqual({ text: 'hello' })
    expect([first.seen, second.seen]).toEqual([0, 1])
    expect(second.tx).not.toBe(first.tx)
    // a handler that is not idempotent writes twice: what the app's own assertions then see
    expect(await records('note')).toHaveLength(2)
    expect(await messages()).toEqual([])
  })

  test('an idempotent handler has its effect once, and both deliveries succeed', async () => {
    target.on('upsertNote', req => UPSERT.into(RECORDS).entries({ ID: req.data.ID, kind: 'upserted', message: req.data.text }))
    const before = testkit.duplicateDeliveries()
    await cds.tx(() => queued.emit('upsertNote', { ID: cds.utils.uuid(), text: 'once' }))
    await cds.flush()
    expect(await records('upserted')).toHaveLength(1)
    const after = testkit.duplicateDeliveries()
    expect(after.delivered - before.delivered).toBe(1)
    expect(after.failed).toBe(before.failed)
  })

  test('a second delivery that fails is logged as an error naming the message and counted; the first delivery stays committed', async () => {
    target.on('insertOnce', req => INSERT.into(RECORDS).entries({ ID: req.data.ID, kind: 'inserted' }))
    const ID = cds.utils.uuid()
    const before = testkit.duplicateDeliveries().failed
    const lines = await logged('error', async () => {
      await cds.tx(() => queued.emit('insertOnce', { ID }))
      await cds.flush()
    })
    const { failed, failures } = testkit.duplicateDeliveries()
    expect(failed - before).toBe(1)
    const failure = failures.at(-1)
    // the database's error: a unique constraint (its class is the driver's)
    expect(failure).toMatchObject({ queue: 'queue', service: 'Target', event: 'insertOnce', error: expect.objectContaining({ message: expect.stringMatching(/unique|constraint/i) }) })
    expect(lines).toEqual([expect.stringMatching(new RegExp(`^queue: message ${failure.ID} \\(Target insertOnce\\) failed on its second delivery \\(deliver: 'twice'\\), so its handlers are not idempotent: `))])
    // what the console shows names the error, also for a driver's error class (under jest another realm's: its
    // inspection shows neither message nor stack), and where it was thrown
    expect(lines[0]).toMatch(/unique|constraint/i)
    expect(lines[0]).toMatch(/\n\s+at /)
    // the first delivery's work committed and its row is gone: the second's failure is reported, not retried
    expect(await records('inserted')).toHaveLength(1)
    expect(await messages()).toEqual([])
    expect(() => testkit.expectIdempotent()).toThrow(`message ${failure.ID} (Target insertOnce) failed on its second delivery`)
  })

  test("a message's outcome (cds-event-queues/test) comes once its second delivery is done too", async () => {
    let runs = 0
    target.on('counted', () => void runs++)
    const [message] = await testkit.queuedBy(() => cds.tx(() => queued.emit('counted', {})))
    expect(runs).toBe(0)
    expect(await testkit.outcome(message)).toMatchObject({ kind: 'succeeded' })
    expect(runs).toBe(2)
  })

  test('each message of a batch is delivered twice', async () => {
    const seen = []
    target.on('count', req => void seen.push(req.queue.messageId))
    await cds.tx(async () => {
      for (let i = 0; i < 30; i++) await queued.emit('count', { i })
    })
    await cds.flush()
    expect(seen).toHaveLength(60)
    const perMessage = new Map()
    for (const id of seen) perMessage.set(id, (perMessage.get(id) ?? 0) + 1)
    expect([...perMessage.values()]).toEqual(Array(30).fill(2))
  })

  test('a message whose first delivery fails is delivered twice only once it succeeded', async () => {
    const deliveries = []
    target.on('flaky', req => {
      deliveries.push(req.queue.attempt)
      if (deliveries.length === 1) throw new Error('not yet')
    })
    const succeeded = monitor().next('outcome', e => e.kind === 'succeeded')
    await cds.tx(() => queued.emit('flaky', {}))
    await succeeded
    // the failed attempt, the retry that succeeded, and its second delivery (the same attempt, delivered again)
    expect(deliveries).toEqual([1, 2, 2])
  })

  test('an inbound message of an inboxed service is received a second time once processed, as a broker redelivers it, and not a third time', async () => {
    const inbox = await cds.connect.to('inboxCopies')
    const received = []
    inbox.on('orders/shipped', msg => void received.push({ data: msg.data, headers: msg.headers }))
    await inbox.processInboundMsg({ user: cds.User.privileged }, { event: 'orders/shipped', data: { order: 'o1' }, headers: { 'x-event-id': 'e1' } })
    await cds.flush()
    expect(received).toEqual([
      { data: { order: 'o1' }, headers: expect.objectContaining({ 'x-event-id': 'e1' }) },
      { data: { order: 'o1' }, headers: expect.objectContaining({ 'x-event-id': 'e1' }) }
    ])
    expect(await messages()).toEqual([])
  })
})
