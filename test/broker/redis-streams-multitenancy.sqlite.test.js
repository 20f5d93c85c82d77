const fs = require('fs')
const path = require('path')
const { suiteRedis } = require('./support/redis')
const { startApp } = require('../support/app')
const { waitFor } = require('../support/wait')
const { subscribe, inTenant } = require('../support/mt')
const cds = require('@sap/cds')

/**
 * redis-streams in a multitenant app (test/mt-app: @sap/cds-mtxs in process, a SQLite file per tenant; cds-mtxs
 * deploys tenants to SAP HANA and SQLite only): an entry of a tenant that is not subscribed (offboarded, or never
 * known) holds back no other tenant's entries and opens no database (issue 31, defect 3).
 */
const redis = suiteRedis()
const MT_APP = path.join(__dirname, '..', 'mt-app')
const test_ = startApp({
  requires: {
    queue: { pollInterval: '1s', backoff: { base: 10, max: 20 } },
    tenantEvents: { kind: 'redis-streams', credentials: { uri: `redis://127.0.0.1:${redis.port}` }, inboxed: true, group: 'mt-app' }
  }
}, { app: MT_APP, deploy: false })
test_.axios.defaults.validateStatus = () => true

let client
beforeAll(async () => {
  client = require('redis').createClient({ url: redis.url })
  client.on('error', () => {})
  await client.connect()
  for (const tenant of ['t1', 't2']) await subscribe(test_, tenant)
})
afterAll(() => client?.destroy())

const entry = (tenant, seq) => ['XADD', 'tenant/paid', '*', 'message', JSON.stringify({ data: { seq }, id: `${tenant}-${seq}` }), 'tenant', tenant]
const pending = async () => Number((await client.sendCommand(['XPENDING', 'tenant/paid', 'mt-app']))[0])
const done = tenant => inTenant(tenant, () => SELECT.from('mt.Done'))

describe('redis-streams in a multitenant app', () => {
  test("an entry of an offboarded or unknown tenant is acknowledged and dropped, with a warning and a count: the other tenants' entries are handled, its database is not opened", async () => {
    const events = await cds.connect.to('tenantEvents')
    events.on('tenant/paid', msg => INSERT.into('mt.Done').entries({ ID: cds.utils.uuid(), tenant: cds.context.tenant, seq: msg.data.seq }))
    await waitFor(async () => (await client.sendCommand(['XINFO', 'GROUPS', 'tenant/paid']).catch(() => [])).length > 0, { what: "the app's group" })
    const res = await test_.DELETE('/-/cds/saas-provisioning/tenant/t2', { auth: { username: 'yves' } })
    expect(res.status).toBeLessThan(300)
    const t2File = test_.dbFile.replace(/\.sqlite$/, '-t2.sqlite')
    const t9File = test_.dbFile.replace(/\.sqlite$/, '-t9.sqlite')
    expect(fs.existsSync(t2File)).toBe(false)

    const LOG = cds.log('redis-streams')
    const warnings = []
    const spy = jest.spyOn(LOG, 'warn').mockImplementation((...args) => void warnings.push(args.map(String).join(' ')))
    try {
      await client.sendCommand(entry('t2', 1))
      await client.sendCommand(entry('t9', 1)) // a tenant MTX never heard of
      for (let seq = 1; seq <= 5; seq++) await client.sendCommand(entry('t1', seq))
      await waitFor(async () => (await done('t1')).length === 5 && (await pending()) === 0, { timeout: 30000, what: "t1's five entries handled, every entry acknowledged" })
    } finally {
      spy.mockRestore()
    }
    expect((await done('t1')).map(d => d.seq).sort()).toEqual([1, 2, 3, 4, 5])
    expect(fs.existsSync(t2File)).toBe(false)
    expect(fs.existsSync(t9File)).toBe(false)
    expect(warnings.filter(w => /dropped 1 entry of tenant t2 .*not subscribed/.test(w))).toHaveLength(1)
    expect(warnings.filter(w => /dropped 1 entry of tenant t9 .*not subscribed/.test(w))).toHaveLength(1)
  })
})
