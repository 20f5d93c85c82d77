const path = require('path')
const { startApp } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES } = require('../support/outbox')
const { subscribe, inTenant } = require('../support/mt')
const cds = require('@sap/cds')

// The consumer half in a multitenant app (test/mt-app: @sap/cds-mtxs in process, a SQLite file per tenant): message
// IDs on the wire (item 1), the idempotent inbox (item 2) and @idempotent operations (item 3) in each tenant's
// database, apart from the others. @sap/cds-mtxs deploys tenants to SAP HANA and SQLite only.
const MT_APP = path.join(__dirname, '..', 'mt-app')
const fast = { backoff: { base: 10, max: 20 } }
const test_ = startApp({
  requires: {
    queue: { pollInterval: '1s', ...fast },
    events: { kind: 'local-messaging', format: 'cloudevents', outboxed: { orderingKey: 'order', ...fast } },
    inbox: { kind: 'local-messaging', inboxed: true, outboxed: { receiptRetention: '1s', ...fast } }
  }
}, { app: MT_APP, deploy: false })
const { POST } = test_
test_.axios.defaults.validateStatus = () => true
const TENANTS = ['t1', 't2']
const RECEIPTS = 'cds.outbox.Receipts'

const done = tenant => inTenant(tenant, () => SELECT.from('mt.Done'))
const empty = tenant => inTenant(tenant, async () => (await SELECT.from(MESSAGES)).length === 0)

describe('the consumer half in a multitenant app', () => {
  beforeAll(async () => {
    for (const tenant of TENANTS) await subscribe(test_, tenant)
  })

  test("a relayed event carries its message ID and its key's sequence number in its tenant", async () => {
    const events = await cds.connect.to('events')
    const received = []
    events.on('changed', msg => void received.push({ tenant: cds.context.tenant, id: msg.headers.id, messageId: msg.queue.messageId, sequence: msg.queue.sequence }))
    for (const tenant of TENANTS) {
      await inTenant(tenant, async () => {
        await events.emit('changed', { order: 'o1' })
        await events.emit('changed', { order: 'o1' })
      })
    }
    await waitFor(() => received.length === 4, { what: 'four events' })
    for (const tenant of TENANTS) {
      const mine = received.filter(r => r.tenant === tenant)
      expect(mine.map(r => r.sequence)).toEqual([1, 2])
      for (const r of mine) expect(r.id).toBe(r.messageId)
    }
  })

  test("the inbox drops a redelivery in the tenant that received it; the same ID in another tenant's inbox is another message", async () => {
    const inbox = await cds.connect.to('inbox')
    const runs = []
    inbox.on('paid', async msg => {
      runs.push(cds.context.tenant)
      await INSERT.into('mt.Done').entries({ ID: cds.utils.uuid(), tenant: cds.context.tenant, seq: msg.data.seq })
    })
    const deliver = tenant => inbox.processInboundMsg({ tenant, user: cds.User.privileged }, { event: 'paid', data: { seq: 100 }, headers: { id: 'm-1' } })
    await deliver('t1')
    await waitFor(() => empty('t1'), { what: "t1's inbox" })
    await deliver('t1')
    await deliver('t2')
    await waitFor(async () => (await empty('t1')) && (await empty('t2')) && runs.length >= 2, { what: 'both inboxes' })
    expect(runs.sort()).toEqual(['t1', 't2'])
    const receipt = tenant => inTenant(tenant, () => SELECT.one.from(RECEIPTS).where({ ID: JSON.stringify({ topic: 'paid', id: 'm-1' }) }))
    expect(await receipt('t1')).toMatchObject({ scope: 'inbox:inbox', state: 'done', duplicates: 1 })
    expect(await receipt('t2')).toMatchObject({ scope: 'inbox:inbox', state: 'done', duplicates: 0 })

    // kept for the inbox queue's receiptRetention, then pruned in every tenant
    const { retention } = require('../../lib/plugin').eventQueues()
    await waitFor(async () => (await retention.run(), !(await receipt('t1')) && !(await receipt('t2'))), { what: 'the receipts pruned in both tenants' })
  })

  test("an @idempotent action answers a repeated Idempotency-Key from the caller's tenant's record", async () => {
    const book = (user, key) => POST('/odata/v4/tenant/book', { seq: 7 }, { auth: { username: user }, headers: { 'Idempotency-Key': `"${key}"` } })
    const first = await book('alice', 'k-mt')
    const again = await book('alice', 'k-mt')
    expect([first.status, again.status]).toEqual([200, 200])
    expect(again.data.value).toBe(first.data.value)
    // erin is in t2: the key means nothing there yet
    const other = await book('erin', 'k-mt')
    expect(other.status).toBe(200)
    expect(other.data.value).not.toBe(first.data.value)
    expect((await done('t1')).filter(r => r.seq === 7)).toHaveLength(1)
    expect((await done('t2')).filter(r => r.seq === 7)).toHaveLength(1)
  })

  test("a request still running in one tenant does not hold up another tenant's request with the same Idempotency-Key", async () => {
    // t1's booking of seq 8 waits after its handler, before its commit: its key is in use until then
    const started = gate()
    const release = gate()
    const tenantService = await cds.connect.to('Tenant')
    tenantService.after('book', async (_, req) => {
      if (req.data.seq !== 8 || cds.context.tenant !== 't1') return
      started.open()
      await release.opened
    })
    const book = (user, key) => POST('/odata/v4/tenant/book', { seq: 8 }, { auth: { username: user }, headers: { 'Idempotency-Key': `"${key}"` } })
    const first = book('alice', 'k-running')
    try {
      await started.opened
      const sameKeyElsewhere = await book('erin', 'k-running')
      expect(sameKeyElsewhere.status).toBe(200)
      // in its own tenant the key is still in use
      expect((await book('alice', 'k-running')).status).toBe(409)
    } finally {
      release.open()
    }
    expect((await first).status).toBe(200)
    expect((await done('t1')).filter(r => r.seq === 8)).toHaveLength(1)
    expect((await done('t2')).filter(r => r.seq === 8)).toHaveLength(1)
  })
})

function gate() {
  let open
  const opened = new Promise(resolve => (open = resolve))
  return { opened, open }
}
