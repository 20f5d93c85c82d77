const { startApp } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES } = require('../support/outbox')
const cds = require('@sap/cds')

const USERS = { ops: { password: 'ops', roles: ['internal-user'] } }
const app = startApp({ requires: { auth: { kind: 'mocked', users: USERS }, queue: { pollInterval: '200ms' } } })

const MB = 1024 * 1024
const tenMegabytes = () => 'x'.repeat(10 * MB)

describe('faults: bad input', () => {
  let target, queued
  const delivered = []
  beforeAll(async () => {
    target = cds.unqueued(await cds.connect.to('Target'))
    target.on('*', req => {
      if (req.event === 'hold') throw new Error('not yet')
      delivered.push({ event: req.event, data: req.data })
    })
    queued = cds.queued(target)
  })
  afterEach(async () => {
    await cds.flush()
    await DELETE.from(MESSAGES)
    delivered.length = 0
  })

  test('cds.queued of something that is not a service fails with an error naming the argument', () => {
    for (const bad of [{}, 'Target', null, () => {}]) expect(() => cds.queued(bad)).toThrow(/Invalid argument of cds\.queued\(srv\)/)
  })

  test.each([
    ['a circular object', () => { const o = { a: 1 }; o.self = o; return o }, /not serialisable as JSON/],
    ['a BigInt', () => ({ amount: 10n }), /'amount' is a bigint/],
    ['a function', () => ({ callback: () => {} }), /'callback' is a function/],
    ['a Map', () => ({ prices: new Map([['A1', 10]]) }), /'prices' is a Map/],
    ['a Set', () => ({ tags: new Set(['new']) }), /'tags' is a Set/],
    ['NaN', () => ({ ratio: 0 / 0 }), /'ratio' is NaN/],
    ['Infinity', () => ({ limit: -Infinity }), /'limit' is -Infinity/],
    ['a Buffer', () => ({ file: Buffer.from('%PDF') }), /'file' is a Buffer/],
    ['a typed array', () => ({ pixels: new Uint8Array([1, 2]) }), /'pixels' is a Uint8Array/],
    ['a Map in a header', () => [{}, { 'x-context': new Map() }], /'x-context' is a Map/]
  ])('a payload with %s fails at emit, writes nothing, and the transaction stays usable', async (_, payload, reason) => {
    await cds.tx(async () => {
      await INSERT.into('test.Records').entries({ ID: cds.utils.uuid(), kind: 'before' })
      // a payload is the event's data, or [data, headers]
      const [data, headers] = [payload()].flat()
      await expect(queued.emit('bad', data, headers)).rejects.toThrow(reason)
      await queued.emit('good', { after: 'the failure' })
      await INSERT.into('test.Records').entries({ ID: cds.utils.uuid(), kind: 'after' })
    })
    await cds.flush()
    expect(delivered).toEqual([{ event: 'good', data: { after: 'the failure' } }])
    const kinds = (await SELECT.from('test.Records').where({ kind: { in: ['before', 'after'] } })).map(r => r.kind).sort()
    expect(kinds).toEqual(['after', 'before'])
    await DELETE.from('test.Records')
  })

  test('a 10 MB payload hits the default maxMessageSize at emit with an error naming the limit and the size', async () => {
    await cds.tx(async () => {
      await expect(queued.emit('huge', { blob: tenMegabytes() })).rejects.toThrow(
        /message is 1048\d{4} bytes, above the queue's maxMessageSize of 4194304 bytes/
      )
      expect(await SELECT.from(MESSAGES)).toHaveLength(0)
    })
  })

  test('with maxMessageSize raised to 16 MB, a 10 MB payload is stored and delivered intact', async () => {
    const plain = cds.unqueued(await cds.connect.to('Plain'))
    const big = cds.queued(plain, { maxMessageSize: 16 * MB })
    let received
    plain.on('huge', req => void (received = req.data.blob))
    const blob = tenMegabytes()
    await cds.tx(() => big.emit('huge', { blob }))
    await waitFor(() => received, { timeout: 30000, what: 'the 10 MB message' })
    expect(received.length).toBe(blob.length)
    expect(received === blob).toBe(true)
  })

  test('event names and data with quotes, SQL fragments and unicode are stored and delivered verbatim', async () => {
    const event = `it's "odd"; DROP TABLE cds_outbox_Messages; -- ⚡ Grüße 日本 \u{1F680}`
    const data = { text: "Robert'); DELETE FROM test_Records; --", quote: '"\'`\\', unicode: 'Zoë 中文 \u{1F389} \u0000end', nested: { '$key': "a'b" } }
    await cds.tx(() => queued.emit(event, data))
    await waitFor(() => delivered.length === 1, { what: 'delivery' })
    expect(delivered[0]).toEqual({ event, data })
  })

  test('invalid queue options fail with an error naming the option, the value and what is allowed', () => {
    const { compileQueue } = require('../../lib/config/queue')
    const where = 'cds.requires.queue'
    expect(() => compileQueue('q', { maxMessageSize: '10MB' }, where)).toThrow(/Invalid cds\.requires\.queue\.maxMessageSize: "10MB"\. Expected an integer >= 1024/)
    expect(() => compileQueue('q', { handlerTimeout: '1.5 fortnights' }, where)).toThrow(/cds\.requires\.queue\.handlerTimeout/)
    expect(() => compileQueue('q', { timeout: 0 }, where)).toThrow(/cds\.requires\.queue\.timeout/)
    expect(() => compileQueue('q', { maxAttempts: -1 }, where)).toThrow(/cds\.requires\.queue\.maxAttempts: -1/)
  })

  test('invalid durations and cron expressions fail at the schedule call', () => {
    expect(() => target.schedule('tick').after('1.5 fortnights')).toThrow(/1\.5 fortnights/)
    expect(() => target.schedule('tick').every('61 * * * *')).toThrow(/61 \* \* \* \*/)
  })

  test('reviving a message that is not a dead letter answers 409 and leaves it as it is', async () => {
    await cds.tx(() => queued.emit('hold', {}))
    const pending = await waitFor(async () => (await SELECT.one.from(MESSAGES).where({ attempts: { '>=': 1 } })), { what: 'a failed attempt' })
    const res = await app.axios.post(`/odata/v4/event-queues/DeadOutboxMessages(${pending.ID})/EventQueuesService.revive`, {},
      { auth: { username: 'ops', password: 'ops' }, validateStatus: () => true })
    expect(res.status).toBe(409)
    expect(res.data.error.message).toMatch(/is not a dead letter/)
    expect((await SELECT.one.from(MESSAGES).where({ ID: pending.ID })).attempts).toBe(pending.attempts)
  })
})
