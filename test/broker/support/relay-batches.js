const { suiteRedis } = require('./redis')
const { startApp } = require('../../support/app')
const { waitFor } = require('../../support/wait')
const { MESSAGES, messages } = require('../../support/outbox')
const cds = require('@sap/cds')

/**
 * The relay of `redis-streams` in batches (lib/runner/relay.ts), on the store `store` (the native one, or 'portable'),
 * with one slot (concurrency 1): the first event of a transaction is claimed at enqueue and relayed alone, the rest
 * are claimed together and relayed in batches of up to 50. The portable store's slots take one message each (it has
 * no savepoints to share a transaction): there, each event is relayed alone, and the same rules hold.
 */
function describeRelayBatches(store) {
  const redis = suiteRedis()
  startApp({
    requires: {
      queue: { concurrency: 1, batchSize: 50, backoff: { base: 50, factor: 2, max: 500 }, ...(store && { store }) },
      relay: { kind: 'redis-streams', credentials: { uri: redis.url }, format: 'cloudevents', publishPrefix: 'app/' }
    },
    log: { levels: { 'redis-streams': 'error', queue: 'error' } }
  })

  /** A client of the suite's Redis outside the app: what the broker holds and how often it read from a socket. */
  let client
  beforeAll(async () => {
    client = require('redis').createClient({ url: redis.url })
    client.on('error', () => {})
    await client.connect()
  })
  afterAll(() => client?.destroy())

  /** Read events the server processed so far: a pipeline of commands written at once is read in one (or a few). */
  const reads = async () => Number(/total_reads_processed:(\d+)/.exec(await client.sendCommand(['INFO', 'stats']))[1])
  /** The entries of `stream`, as the CloudEvents they carry. */
  const entries = async stream => {
    const { readReply } = require('../../../lib/messaging/stream-entries')
    const reply = await client.sendCommand(['XREAD', 'COUNT', '10000', 'STREAMS', stream, '0-0'])
    return readReply(reply).map(entry => JSON.parse(entry.fields.message))
  }
  const relayed = what => waitFor(async () => (await messages()).length === 0, { timeout: 60000, what })
  const numbers = (from, to) => Array.from({ length: to - from }, (_, i) => from + i)
  const byNumber = (a, b) => a - b

  describe(`relay to redis-streams in batches${store ? ` (${store} store)` : ''}`, () => {
    afterEach(() => DELETE.from(MESSAGES))

    const batches = store !== 'portable'
    const inFewRoundTrips = batches ? ' in a few round trips to Redis, not one each,' : ''
    test(`the events of a transaction reach the stream${inFewRoundTrips} each under the queue's message ID`, async () => {
      const relay = await cds.connect.to('relay')
      const before = await reads()
      let IDs
      await cds.tx(async () => {
        for (let n = 0; n < 120; n++) await relay.emit('relay/batched', { n })
        IDs = (await SELECT.from(MESSAGES).columns('ID')).map(row => row.ID)
      })
      await relayed('the relay of 120 events')
      // the INFO of `before` is read after it answered, this one before: each counts once
      const roundTrips = (await reads()) - before - 1
      const events = await entries('app/relay/batched')
      expect(events.map(e => e.data.n).sort(byNumber)).toEqual(numbers(0, 120))
      expect(new Set(events.map(e => e.id))).toEqual(new Set(IDs))
      // one event alone (claimed at enqueue), the other 119 in pipelines of at most 50
      if (batches) expect(roundTrips).toBeLessThan(20)
    })

    test('an event Redis refuses fails alone: the others of its batch are published once and completed, it keeps its row with the error', async () => {
      // XADD to a key that holds a string: WRONGTYPE, for that entry only
      await client.sendCommand(['SET', 'app/relay/refused', 'not a stream'])
      const relay = await cds.connect.to('relay')
      await cds.tx(async () => {
        for (let n = 0; n < 40; n++) await relay.emit(n === 20 ? 'relay/refused' : 'relay/accepted', { n })
      })
      const [row] = await waitFor(async () => {
        const rows = await messages()
        return rows.length === 1 && rows[0].attempts >= 1 && rows
      }, { timeout: 60000, what: 'the 39 accepted events relayed, the refused one failed' })
      expect(JSON.parse(row.msg).data).toEqual({ n: 20 })
      expect(row.lastError).toMatch(/WRONGTYPE/)
      const accepted = await entries('app/relay/accepted')
      expect(accepted.map(e => e.data.n).sort(byNumber)).toEqual(numbers(0, 40).filter(n => n !== 20))
      await client.sendCommand(['DEL', 'app/relay/refused'])
    })

    test("a key's events reach the stream in enqueue order, the next one after Redis accepted the one before", async () => {
      const relay = await cds.connect.to('relay')
      await cds.tx(async () => {
        for (let n = 0; n < 60; n++) await relay.emit('relay/keyed', { key: `k${n % 3}`, n }, { 'x-ordering-key': `k${n % 3}` })
      })
      await relayed('the relay of 60 keyed events')
      const events = await entries('app/relay/keyed')
      expect(events).toHaveLength(60)
      for (const key of ['k0', 'k1', 'k2']) {
        const ofKey = events.filter(e => e.data.key === key)
        expect(ofKey.map(e => e.data.n)).toEqual(numbers(0, 60).filter(n => `k${n % 3}` === key))
        // the key's sequence numbers (lib/wire.ts) in the same order
        expect(ofKey.map(e => Number(e.sequence))).toEqual(numbers(1, 21))
      }
    })

    test('a batched event carries what emit gives an event relayed alone: the topic with publishPrefix, the CloudEvents attributes, its own headers', async () => {
      const relay = await cds.connect.to('relay')
      await cds.tx(() => relay.emit('relay/shape', { n: -1 }, { 'x-own': 'kept' }))
      await relayed('the event relayed alone')
      await cds.tx(async () => {
        for (let n = 0; n < 30; n++) await relay.emit('relay/shape', { n }, { 'x-own': 'kept' })
      })
      await relayed('the batched events')
      const [alone, ...batched] = await entries('app/relay/shape')
      expect(alone).toMatchObject({ data: { n: -1 }, type: 'relay/shape', specversion: '1.0', 'x-own': 'kept', id: expect.stringMatching(/^[0-9a-f-]{36}$/) })
      expect(batched).toHaveLength(30)
      for (const event of batched) {
        expect(Object.keys(event).sort()).toEqual(Object.keys(alone).sort())
        expect(event).toMatchObject({ type: 'relay/shape', specversion: '1.0', source: alone.source, datacontenttype: alone.datacontenttype, 'x-own': 'kept' })
        expect(Date.parse(event.time)).toBeGreaterThanOrEqual(Date.parse(alone.time))
      }
      expect(new Set(batched.map(e => e.id)).size).toBe(30)
    })
  })
}

module.exports = { describeRelayBatches }
