const path = require('path')
const { startApp } = require('../support/app')
const { MESSAGES } = require('../support/outbox')
const { subscribe, inTenant } = require('../support/mt')
const testkit = require('../../test.js')
const cds = require('@sap/cds')

// The duplicate-delivery test mode (deliver: 'twice', README "Duplicate delivery") in a multitenant app (test/mt-app:
// @sap/cds-mtxs in process, a SQLite file per tenant): the second delivery runs in the tenant of the first, and an
// inbound message is received again in its tenant, where that tenant's inbox deduplicates it. @sap/cds-mtxs deploys
// tenants to SAP HANA and SQLite only, so there is no PostgreSQL variant.
const MT_APP = path.join(__dirname, '..', 'mt-app')
const fast = { backoff: { base: 10, max: 20 } }
const test_ = startApp({
  requires: {
    queue: { deliver: 'twice', pollInterval: '1s', ...fast },
    inbox: { kind: 'local-messaging', inboxed: true, outboxed: fast },
    // keeps no record of the IDs it received: its subscriber sees the redelivered copy
    inboxCopies: { kind: 'local-messaging', inboxed: { messageId: false }, outboxed: fast }
  }
}, { app: MT_APP, deploy: false })
const TENANTS = ['t1', 't2']
const RECEIPTS = 'cds.outbox.Receipts'

const done = tenant => inTenant(tenant, () => SELECT.from('mt.Done'))
const pending = tenant => inTenant(tenant, () => SELECT.from(MESSAGES))

describe("deliver: 'twice' in a multitenant app", () => {
  beforeAll(async () => {
    for (const tenant of TENANTS) await subscribe(test_, tenant)
  })
  afterEach(() => testkit.expectIdempotent())

  test('a message queued in a tenant is delivered a second time in that tenant, with the same message ID', async () => {
    const work = await cds.connect.to('Work')
    const deliveries = []
    cds.unqueued(work).before('record', req => void deliveries.push({ tenant: cds.context.tenant, messageId: req.queue.messageId }))
    const before = testkit.duplicateDeliveries().delivered
    await inTenant('t1', () => work.emit('record', { seq: 1 }))
    await cds.flush()
    expect(deliveries).toHaveLength(2)
    const [first, second] = deliveries
    expect(first.tenant).toBe('t1')
    expect(second).toEqual(first)
    expect(testkit.duplicateDeliveries().delivered - before).toBe(1)
    // the handler is not idempotent: it wrote twice, in t1's database, and nothing in t2's
    expect((await done('t1')).map(r => [r.tenant, r.seq])).toEqual([['t1', 1], ['t1', 1]])
    expect(await done('t2')).toEqual([])
    for (const tenant of TENANTS) expect(await pending(tenant)).toEqual([])
  })

  test("an inbound message is redelivered in its tenant, where the inbox drops it: the subscriber runs once", async () => {
    const inbox = await cds.connect.to('inbox')
    const runs = []
    inbox.on('paid', async msg => {
      runs.push({ tenant: cds.context.tenant, id: msg.headers.id })
      await INSERT.into('mt.Done').entries({ ID: cds.utils.uuid(), tenant: cds.context.tenant, seq: msg.data.seq })
    })
    const before = testkit.duplicateDeliveries().delivered
    await inbox.processInboundMsg({ tenant: 't1', user: cds.User.privileged }, { event: 'paid', data: { seq: 100 }, headers: { id: 'm-twice' } })
    await cds.flush()
    expect(runs).toEqual([{ tenant: 't1', id: 'm-twice' }])
    expect(testkit.duplicateDeliveries().delivered - before).toBe(1)
    // the copy was received in t1 (its receipt counts it), not in t2
    const receipt = tenant => inTenant(tenant, () => SELECT.one.from(RECEIPTS).where({ ID: JSON.stringify({ topic: 'paid', id: 'm-twice' }) }))
    expect(await receipt('t1')).toMatchObject({ scope: 'inbox:inbox', state: 'done', duplicates: 1 })
    expect(await receipt('t2')).toBeFalsy()
    expect((await done('t1')).filter(r => r.seq === 100)).toHaveLength(1)
    expect((await done('t2')).filter(r => r.seq === 100)).toEqual([])
    for (const tenant of TENANTS) expect(await pending(tenant)).toEqual([])
  })

  test('without the inbox deduplication, the redelivered copy reaches the subscriber again in the same tenant', async () => {
    const inbox = await cds.connect.to('inboxCopies')
    const runs = []
    inbox.on('shipped', msg => void runs.push({ tenant: cds.context.tenant, data: msg.data }))
    await inbox.processInboundMsg({ tenant: 't2', user: cds.User.privileged }, { event: 'shipped', data: { order: 'o1' }, headers: { id: 'm-copies' } })
    await cds.flush()
    expect(runs).toEqual([
      { tenant: 't2', data: { order: 'o1' } },
      { tenant: 't2', data: { order: 'o1' } }
    ])
    for (const tenant of TENANTS) expect(await pending(tenant)).toEqual([])
  })
})
