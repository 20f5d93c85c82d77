require('../support/telemetry')
const { startApp } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES, messages } = require('../support/outbox')
const { scrape, points } = require('../support/telemetry')
const { OPERATOR_USERS: USERS } = require('../support/operators')
const cds = require('@sap/cds')

// The idempotent inbox (issue 23, item 2): an inboxed messaging service drops a broker's redelivery of a message it
// received before, whatever the first copy is doing. Messages arrive as a broker adapter hands them over:
// `processInboundMsg`, acknowledged to the broker when it resolves.
const fast = { backoff: { base: 10, max: 20 } }
const app = startApp({
  requires: {
    auth: { kind: 'mocked', users: USERS },
    queue: fast,
    // `inbox` (test/app/package.json): local-messaging, inboxed: true, not outboxed
    eventIds: { kind: 'local-messaging', inboxed: { messageId: 'data.eventId' }, outboxed: false },
    noDedupe: { kind: 'local-messaging', inboxed: { messageId: false }, outboxed: false },
    // its first failed attempt waits an hour for the next one: the message stays waiting in the inbox
    patient: { kind: 'local-messaging', inboxed: true, outboxed: { backoff: { base: '1h' } } },
    counting: { kind: 'local-messaging', inboxed: true, outboxed: false },
    shortLived: { kind: 'local-messaging', inboxed: true, outboxed: { receiptRetention: '1s', ...fast } }
  },
  log: { levels: { odata: 'warn' } }
})

const RECEIPTS = 'cds.outbox.Receipts'
const receipt = (scope, ID) => SELECT.one.from(RECEIPTS).where({ scope, ID })
/** The receipt key of an event without a CloudEvents source: its ID within its topic. */
const inTopic = (topic, id) => JSON.stringify({ topic, id })

/** What a broker adapter does with a message: hand it to the service; the broker is acknowledged when this resolves. */
async function deliver(service, event, { id, data = {}, headers = {} } = {}) {
  const srv = await cds.connect.to(service)
  return srv.processInboundMsg({ user: cds.User.privileged }, { event, data, headers: id ? { id, ...headers } : headers })
}

/** A subscriber recording what it received; `behaviour(msg, n)` may throw or wait (n counts its calls from 1). */
async function subscribe(service, event, behaviour = () => {}) {
  const srv = await cds.connect.to(service)
  const runs = []
  srv.on(event, async msg => {
    runs.push(msg.data)
    await behaviour(msg, runs.length)
    await INSERT.into('test.Records').entries({ ID: cds.utils.uuid(), kind: `${service}.${event}`, message: String(msg.data.n ?? '') })
  })
  return runs
}

const records = kind => SELECT.from('test.Records').where({ kind })
const inboxEmpty = async () => (await messages()).length === 0

function gate() {
  let open
  const opened = new Promise(resolve => (open = resolve))
  return { opened, open }
}

describe('the idempotent inbox', () => {
  afterEach(async () => {
    await cds.flush()
    await DELETE.from(MESSAGES)
  })

  test('a redelivery of a processed message is acknowledged and not processed again', async () => {
    const runs = await subscribe('inbox', 'paid')
    await deliver('inbox', 'paid', { id: 'm-done', data: { n: 1 } })
    await waitFor(async () => (await records('inbox.paid')).length === 1 && inboxEmpty(), { what: 'the first copy processed' })
    await expect(deliver('inbox', 'paid', { id: 'm-done', data: { n: 1 } })).resolves.toBeUndefined()
    expect(await messages()).toEqual([])
    await cds.flush()
    expect(runs).toHaveLength(1)
    expect(await records('inbox.paid')).toHaveLength(1)
  })

  test('a redelivery while the first copy waits in the inbox for its retry is dropped', async () => {
    const runs = await subscribe('patient', 'paid', (_, n) => {
      if (n === 1) throw new Error('subscriber not ready')
    })
    await deliver('patient', 'paid', { id: 'm-waiting' })
    await waitFor(async () => (await messages())[0]?.attempts === 1, { what: 'the first attempt failed' })
    await deliver('patient', 'paid', { id: 'm-waiting' })
    expect(await messages()).toHaveLength(1)
    expect(runs).toHaveLength(1)
  })

  test('a redelivery while the first copy runs is dropped', async () => {
    const { opened, open } = gate()
    const started = gate()
    const runs = await subscribe('inbox', 'shipped', async () => {
      started.open()
      await opened
    })
    await deliver('inbox', 'shipped', { id: 'm-running', data: { n: 2 } })
    await started.opened
    await deliver('inbox', 'shipped', { id: 'm-running', data: { n: 2 } })
    expect((await messages()).map(r => r.status)).toEqual(['processing'])
    open()
    await waitFor(inboxEmpty, { what: 'the first copy processed' })
    await cds.flush()
    expect(runs).toHaveLength(1)
    expect(await records('inbox.shipped')).toHaveLength(1)
  })

  test("the ID is recorded as processed in the subscriber's transaction: not while its attempts roll back, kept for receiptRetention once one commits", async () => {
    const states = []
    await subscribe('inbox', 'checked', async (_, n) => {
      states.push((await receipt('inbox:inbox', inTopic('checked', 'm-tx')))?.state)
      if (n === 1) throw new Error('rolled back')
    })
    await deliver('inbox', 'checked', { id: 'm-tx' })
    await waitFor(inboxEmpty, { what: 'the second attempt' })
    // what the subscriber saw of its own receipt in its transactions: received (the failed one rolled back)
    expect(states).toEqual(['received', 'received'])
    const done = await receipt('inbox:inbox', inTopic('checked', 'm-tx'))
    expect(done.state).toBe('done')
    const week = 7 * 24 * 3600 * 1000
    expect(Date.parse(done.expiresAt) - Date.parse(done.recordedAt)).toBeGreaterThanOrEqual(week)
  })

  test("by default the ID is CloudEvents' id, else the x-message-id header the plugin sends in other formats", async () => {
    const runs = await subscribe('inbox', 'plain')
    await deliver('inbox', 'plain', { headers: { 'x-message-id': 'm-plain' } })
    await waitFor(inboxEmpty, { what: 'the first copy processed' })
    await deliver('inbox', 'plain', { headers: { 'X-Message-ID': 'm-plain' } })
    expect(await messages()).toEqual([])
    expect(runs).toHaveLength(1)
  })

  test('inboxed.messageId names where the ID is: a path into the data', async () => {
    const runs = await subscribe('eventIds', 'booked')
    await deliver('eventIds', 'booked', { id: 'header-1', data: { eventId: 'e-1', n: 1 } })
    await deliver('eventIds', 'booked', { id: 'header-2', data: { eventId: 'e-1', n: 1 } })
    await deliver('eventIds', 'booked', { id: 'header-1', data: { eventId: 'e-2', n: 2 } })
    await waitFor(async () => (await records('eventIds.booked')).length === 2 && inboxEmpty(), { what: 'two messages' })
    expect(runs.map(d => d.eventId).sort()).toEqual(['e-1', 'e-2'])
  })

  test('the same id from two sources is two events (CloudEvents: source + id): each is applied, and only a redelivery is dropped', async () => {
    const runs = await subscribe('inbox', 'sourced')
    for (const n of [1, 2, 3]) {
      await deliver('inbox', 'sourced', { id: `m-${n}`, headers: { source: '/orders' }, data: { n: `orders-${n}` } })
      await deliver('inbox', 'sourced', { id: `m-${n}`, headers: { source: '/billing' }, data: { n: `billing-${n}` } })
    }
    await deliver('inbox', 'sourced', { id: 'm-2', headers: { source: '/billing' }, data: { n: 'billing-2' } })
    await waitFor(inboxEmpty, { what: 'the inbox to empty' })
    await cds.flush()
    expect(runs.map(d => d.n).sort()).toEqual(['billing-1', 'billing-2', 'billing-3', 'orders-1', 'orders-2', 'orders-3'])
  })

  test('an ID without a source (x-message-id, a path into the data) is unique within its topic: the same one on another topic is another event', async () => {
    const plain = [await subscribe('inbox', 'plainOne'), await subscribe('inbox', 'plainTwo')]
    await deliver('inbox', 'plainOne', { headers: { 'x-message-id': 'm-topic' } })
    await deliver('inbox', 'plainTwo', { headers: { 'x-message-id': 'm-topic' } })
    const byPath = [await subscribe('eventIds', 'booked2'), await subscribe('eventIds', 'cancelled')]
    await deliver('eventIds', 'booked2', { data: { eventId: 'e-topic', n: 1 } })
    await deliver('eventIds', 'cancelled', { data: { eventId: 'e-topic', n: 2 } })
    await deliver('eventIds', 'cancelled', { data: { eventId: 'e-topic', n: 2 } })
    await waitFor(inboxEmpty, { what: 'the inbox to empty' })
    await cds.flush()
    expect([...plain, ...byPath].map(runs => runs.length)).toEqual([1, 1, 1, 1])
  })

  test('a receipt recorded by an earlier version (by the ID alone) still drops a redelivery of its message', async () => {
    const week = new Date(Date.now() + 7 * 24 * 3600 * 1000).toISOString()
    await INSERT.into(RECEIPTS).entries({ scope: 'inbox:inbox', ID: 'm-before', state: 'done', duplicates: 0, recordedAt: new Date().toISOString(), expiresAt: week })
    const runs = await subscribe('inbox', 'upgraded')
    await deliver('inbox', 'upgraded', { id: 'm-before', headers: { source: '/orders' } })
    expect(await messages()).toEqual([])
    await cds.flush()
    expect(runs).toHaveLength(0)
    expect(await receipt('inbox:inbox', 'm-before')).toMatchObject({ duplicates: 1 })
  })

  test('messageId: false deduplicates nothing; a message without an ID is processed as it comes', async () => {
    const off = await subscribe('noDedupe', 'sent')
    await deliver('noDedupe', 'sent', { id: 'same' })
    await deliver('noDedupe', 'sent', { id: 'same' })
    const anonymous = await subscribe('inbox', 'anonymous')
    await deliver('inbox', 'anonymous')
    await deliver('inbox', 'anonymous')
    await waitFor(async () => (await records('noDedupe.sent')).length === 2 && (await records('inbox.anonymous')).length === 2, { what: 'four messages' })
    expect(off).toHaveLength(2)
    expect(anonymous).toHaveLength(2)
  })

  test('duplicates are counted in the metrics and in statistics() of the operator service', async () => {
    const counted = async () => points(await scrape(), 'cds_event_queues.duplicates', { 'cds_event_queues.receiver': 'inbox:counting' })[0]?.value ?? 0
    await subscribe('counting', 'counted')
    for (let i = 0; i < 3; i++) await deliver('counting', 'counted', { id: 'm-counted' })
    await waitFor(inboxEmpty, { what: 'the message processed' })
    expect(await counted()).toBe(2)
    const res = await app.axios.get('/odata/v4/event-queues/statistics()', { auth: { username: 'ops', password: USERS.ops.password } })
    expect(res.data.value.find(s => s.service === 'counting' && s.event === null)).toMatchObject({ queue: 'queue', pending: 0, dead: 0, duplicates: 2 })
  })

  test('receipts past their retention are deleted in small batches; a message still in the inbox keeps its receipt', async () => {
    const { opened, open } = gate()
    await subscribe('shortLived', 'expiring', (msg) => msg.data.wait && opened)
    try {
      await deliver('shortLived', 'expiring', { id: 'm-expiring' })
      await deliver('shortLived', 'expiring', { id: 'm-held', data: { wait: true } })
      await waitFor(async () => (await receipt('inbox:shortLived', inTopic('expiring', 'm-expiring')))?.state === 'done', { what: 'the first one processed' })
      // many expired receipts, as a week of traffic leaves them
      const past = i => new Date(Date.now() - 60000 + (i % 7)).toISOString()
      await INSERT.into(RECEIPTS).entries(Array.from({ length: 1200 }, (_, i) => ({ scope: 'inbox:old', ID: `old-${i}`, state: 'done', expiresAt: past(i) })))
      const { pruneExpired } = require('../../lib/receipts/receipts')
      expect(await cds.tx(() => pruneExpired(Date.now(), 500))).toBe(500)
      // the plugin's own cleanup may delete it first, as soon as it expired
      const expired = async () => {
        const done = await receipt('inbox:shortLived', inTopic('expiring', 'm-expiring'))
        return !done || Date.now() > Date.parse(done.expiresAt)
      }
      await waitFor(expired, { what: 'the retention to pass' })
      // a cleanup that started before the receipt expired is shared by run(): the next one takes it
      const { retention } = require('../../lib/plugin').eventQueues()
      await waitFor(async () => (await retention.run(), !(await receipt('inbox:shortLived', inTopic('expiring', 'm-expiring')))), { what: 'the cleanup' })
      expect(await SELECT.from(RECEIPTS).where({ scope: 'inbox:old' })).toEqual([])
      expect(await receipt('inbox:shortLived', inTopic('expiring', 'm-held'))).toMatchObject({ state: 'received', expiresAt: null })
    } finally {
      open()
    }
  })
})
