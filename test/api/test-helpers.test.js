const { startApp } = require('../support/app')
const { MESSAGES } = require('../support/outbox')
const cds = require('@sap/cds')
// `require('cds-event-queues/test')` in an app; here the package's own file
const { messages, queuedBy, expectQueued, outcome, expectIdempotent } = require('../../test.js')

// The test helpers a CAP app's own tests use (README, Testing an app's queued work), on the test app: `Target` is
// served (its action `act` queues what the request asks for), `Keyed` orders its messages by `data.key`, `Failing`
// is on a queue of two attempts.
const { POST } = startApp({
  requires: {
    queue: { pollInterval: '1h', backoff: { base: 10, max: 50 } },
    Keyed: { impl: 'srv/plain-service.js', outboxed: { orderingKey: 'key' } },
    Failing: { impl: 'srv/plain-service.js', outboxed: { maxAttempts: 2 } }
  }
})

describe('test helpers (cds-event-queues/test)', () => {
  let target, queued, keyed, failing
  const ran = []
  beforeAll(async () => {
    target = await cds.connect.to('Target')
    queued = cds.queued(target)
    keyed = await cds.connect.to('Keyed')
    failing = await cds.connect.to('Failing')
    cds.unqueued(failing).on('fail', () => {
      throw new Error('the remote system is down')
    })
    cds.unqueued(keyed).on('*', req => void ran.push(req.event))
    target.on('noted', req => void ran.push(req.data.text))
    // the app's own action: a state change and, in its transaction, the event it queues
    target.on('act', async req => {
      await INSERT.into('test.Records').entries({ ID: cds.utils.uuid(), kind: 'acted', message: req.data.value })
      await queued.emit('noted', { text: req.data.value }, { 'x-origin': 'act' })
      if (req.data.value === 'reject') req.reject(400, 'rejected after queueing')
      return req.data.value
    })
  })
  afterEach(async () => {
    await cds.flush()
    await DELETE.from(MESSAGES)
    ran.length = 0
  })

  test('messages() reads the queue table with msg decoded: service, event, data, headers, key, due time, status', async () => {
    const before = Date.now()
    // held back until they are read: messages due at once would run (and be gone) right after the commit
    const [shipped, query, later] = await queuedBy(() => cds.tx(async () => {
      await keyed.emit('shipped', { key: 'order-1', n: 1 }, { 'x-trace': 't1' })
      await queued.run(INSERT.into('Target.Records').entries({ ID: cds.utils.uuid(), kind: 'queried' }))
      await target.schedule('noted', { text: 'later' }).after('1h')
    }))
    expect(shipped).toMatchObject({ queue: 'Keyed', service: 'Keyed', event: 'shipped', data: { key: 'order-1', n: 1 }, headers: { 'x-trace': 't1' }, key: 'order-1', status: 'pending', attempts: 0 })
    expect(shipped.dueAt.getTime()).toBeGreaterThanOrEqual(before)
    expect(query).toMatchObject({ service: 'Target', event: 'CREATE', query: { INSERT: { into: { ref: ['Target.Records'] } } } })
    // due in an hour: listed last, as messages are in the order they are due
    expect(later).toMatchObject({ queue: 'queue', service: 'Target', event: 'noted', data: { text: 'later' }, key: undefined, task: 'noted', status: 'pending' })
    expect(later.dueAt.getTime()).toBeGreaterThanOrEqual(before + 3600_000)
    await cds.flush()
    expect(await messages()).toEqual([later])
    expect(await messages({ service: 'Target', event: 'noted' })).toEqual([later])
    expect(await messages({ event: 'shipped' })).toEqual([])
  })

  test('queuedBy() returns what a request queued and committed, read before any of it ran; cds.flush() then runs it', async () => {
    const [noted, ...more] = await queuedBy(() => POST('/odata/v4/target/act', { value: 'hello' }))
    expect(more).toEqual([])
    expect(noted).toMatchObject({ service: 'Target', event: 'noted', data: { text: 'hello' }, headers: { 'x-origin': 'act' }, status: 'pending' })
    expect(ran).toEqual([])
    await cds.flush()
    expect(ran).toEqual(['hello'])
    expect(await messages()).toEqual([])
  })

  test('queuedBy() of a request that fails rejects with its error, and nothing it queued is left', async () => {
    await expect(queuedBy(() => POST('/odata/v4/target/act', { value: 'reject' }))).rejects.toThrow('rejected after queueing')
    expect(await messages()).toEqual([])
  })

  test('expectQueued() passes when a state transition queues exactly the expected events in its own transaction, and returns them', async () => {
    const acted = await expectQueued(() => target.send('act', { value: 'ok' }), { service: 'Target', event: 'noted', data: { text: 'ok' } })
    expect(acted).toMatchObject([{ event: 'noted', status: 'pending' }])
    expect(await SELECT.from('test.Records').where({ kind: 'acted', message: 'ok' })).toHaveLength(1)
    const rolledBack = await expectQueued(() => target.send('act', { value: 'undone' }), { event: 'noted', data: { text: 'undone' } }, { rollback: true })
    expect(rolledBack).toMatchObject([{ event: 'noted' }])
    expect(await SELECT.from('test.Records').where({ kind: 'acted', message: 'undone' })).toEqual([])
  })

  test('expectQueued() fails naming what was queued when the events differ, are missing or are more; the transition is rolled back', async () => {
    const act = () => target.send('act', { value: 'v' })
    await expect(expectQueued(act, { event: 'shipped' })).rejects.toThrow('expectQueued: the transaction queued 1 message where 1 was expected, or others')
    await expect(expectQueued(act, [{ event: 'noted' }, { event: 'noted' }])).rejects.toThrow('queued 1 message where 2 were expected')
    await expect(expectQueued(act, [], { rollback: true })).rejects.toMatchObject({ name: 'AssertionError', actual: [expect.objectContaining({ event: 'noted', data: { text: 'v' } })], expected: [] })
    expect(await SELECT.from('test.Records').where({ kind: 'acted', message: 'v' })).toEqual([])
    expect(await messages()).toEqual([])
  })

  test('expectQueued() with rollback fails for an event queued in a transaction of its own: it would be sent for a change that rolled back', async () => {
    const outside = () => cds.tx(() => queued.emit('noted', { text: 'outside' }))
    await expect(expectQueued(outside, { event: 'noted' }, { rollback: true })).rejects.toThrow('expectQueued: 1 message is left after the transaction rolled back')
  })

  test('outcome() waits for what became of a message: retried, then dead; an outcome that came first is found too', async () => {
    const [message] = await queuedBy(() => cds.tx(() => failing.emit('fail', {})))
    expect(await outcome(message, { kind: 'retried' })).toEqual({ ID: message.ID, queue: 'Failing', kind: 'retried' })
    expect(await outcome(message)).toEqual({ ID: message.ID, queue: 'Failing', kind: 'dead' })
    // asked again after the fact
    expect(await outcome(message.ID, { kind: 'retried' })).toMatchObject({ kind: 'retried' })
    expect(await messages({ service: 'Failing' })).toMatchObject([{ status: 'dead', attempts: 2, lastError: expect.stringContaining('the remote system is down') }])
  })

  test('outcome() of a message that succeeded; one that does not come rejects naming the message and its outcomes so far', async () => {
    const [message] = await queuedBy(() => cds.tx(() => queued.emit('noted', { text: 'done' })))
    expect(await outcome(message)).toMatchObject({ kind: 'succeeded' })
    await expect(outcome(message, { kind: 'dead', timeout: 50 })).rejects.toThrow(`No outcome dead of message ${message.ID} within 50 ms (its outcomes so far: succeeded)`)
  })

  test("expectIdempotent() without the duplicate-delivery test mode fails, saying how to switch it on", () => {
    expect(() => expectIdempotent()).toThrow("The duplicate-delivery test mode is off: set cds.requires.queue.deliver: 'twice' (in the [test] profile)")
  })
})
