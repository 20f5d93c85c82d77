const http = require('http')
const { format } = require('util')
const { startApp, CAPIRE_APP } = require('../support/app')
const { MESSAGES, capRow } = require('../support/outbox')
const { monitor } = require('../support/monitor')
const { waitFor } = require('../support/wait')

/**
 * The plugin in an app written from capire (test/capire-app): CAP's dead letter queue recipe copied from the guide,
 * an outboxed remote service, a messaging service, options tuned in a profile. CAP's columns decide what happens,
 * whoever writes them.
 */
process.env.CDS_ENV = 'tuned' // maxAttempts 3, pollInterval 200ms, short backoff
process.env.NO_TELEMETRY = 'true'

const logged = []
for (const level of ['warn', 'error']) {
  const original = console[level]
  console[level] = (...args) => {
    logged.push(format(...args)) // as the console prints them: errors with their stacks
    original.apply(console, args)
  }
}

// The reviews system the queued calls go to: a real HTTP server on 127.0.0.1, answering `status`.
const remote = { status: 200, calls: [] }
const server = http.createServer((req, res) => {
  let body = ''
  req.on('data', chunk => (body += chunk))
  req.on('end', () => {
    remote.calls.push({ url: req.url, body: JSON.parse(body || 'null') })
    res.writeHead(remote.status, { 'content-type': 'application/json' }).end('{}')
  })
})
beforeAll(async () => {
  await new Promise(resolve => server.listen(0, '127.0.0.1', resolve))
  require('@sap/cds').env.requires.ReviewsService.credentials = { url: `http://127.0.0.1:${server.address().port}` }
})
afterAll(() => new Promise(resolve => server.close(resolve)))

const app = startApp({}, { app: CAPIRE_APP })
const cds = require('@sap/cds')

const OPS = { auth: { username: 'ops', password: 'ops' }, validateStatus: () => true }
const recipe = path => `/odata/v4/outbox-dead-letter-queue${path}`
const ours = path => `/odata/v4/event-queues${path}`
const order = book => app.axios.post('/odata/v4/catalog/submitOrder', { book, quantity: 1 })
const callsFor = book => remote.calls.filter(c => c.body?.book === book)
const rowOf = ID => SELECT.one.from(MESSAGES, ID)

/** Submits an order while the reviews system is down, until its queued call is a dead letter; its row ID. */
async function deadOrder(book) {
  remote.status = 503
  await order(book)
  const dead = await waitFor(async () => {
    const rows = await SELECT.from(MESSAGES).where({ attempts: { '>=': 3 } })
    return rows.find(r => JSON.parse(r.msg).data?.book === book)
  }, { what: `the call for book ${book} to become a dead letter` })
  return dead.ID
}

describe('drop-in for an app written from capire', () => {
  beforeEach(async () => {
    remote.status = 200
    await cds.flush()
  })
  afterEach(() => DELETE.from(MESSAGES))

  test("an app with CAP's dead letter recipe compiles and serves the recipe's service beside the plugin's own", async () => {
    expect(cds.services.OutboxDeadLetterQueueService).toBeDefined()
    expect(cds.services.EventQueuesService).toBeDefined()
    expect((await app.axios.get(recipe('/DeadOutboxMessages'), OPS)).status).toBe(200)
    expect((await app.axios.get(ours('/DeadOutboxMessages'), OPS)).status).toBe(200)
  })

  test("no warning about an action named delete comes from the plugin's service (the recipe's own still gets CAP's)", () => {
    const conflicts = logged.filter(line => line.includes("custom action 'delete()' conflicts"))
    expect(conflicts.some(line => line.includes('OutboxDeadLetterQueueService'))).toBe(true)
    expect(conflicts.filter(line => line.includes('EventQueuesService'))).toEqual([])
  })

  test("a dead letter the recipe revives with attempts = 0 runs again, and the recipe and the plugin list the same dead letters", async () => {
    const ID = await deadOrder(1)
    const listed = async url => (await app.axios.get(url, OPS)).data.value.map(r => r.ID)
    expect(await listed(recipe('/DeadOutboxMessages'))).toEqual([ID])
    expect(await listed(ours('/DeadOutboxMessages'))).toEqual([ID])
    remote.status = 200
    const before = callsFor(1).length
    const revived = monitor().next('outcome', e => e.ID === ID && e.kind === 'succeeded', 10000)
    const res = await app.axios.post(recipe(`/DeadOutboxMessages(${ID})/OutboxDeadLetterQueueService.revive`), {}, OPS)
    expect(res.status).toBeLessThan(300)
    await revived
    expect(callsFor(1).length).toBe(before + 1)
    expect(await rowOf(ID)).toBeUndefined()
  })

  test('a dead letter whose attempts an operator sets to maxAttempts - 1 runs again; its next failure is the dead letter again, with one #failed callback', async () => {
    const failed = []
    const reviews = cds.unqueued(await cds.connect.to('ReviewsService'))
    reviews.on('CREATE/#failed', req => void failed.push(req.data.book))
    const ID = await deadOrder(2)
    await cds.flush()
    expect(failed).toEqual([2])
    const calls = callsFor(2).length
    const deadAgain = monitor().next('outcome', e => e.ID === ID && e.kind === 'dead', 10000)
    await UPDATE(MESSAGES, ID).set({ attempts: 2 })
    await deadAgain
    await cds.flush()
    expect(await rowOf(ID)).toMatchObject({ attempts: 3 })
    expect(callsFor(2)).toHaveLength(calls + 1)
    expect(failed).toEqual([2, 2])
  })

  test("a row another runner holds (status 'processing', lastAttemptTimestamp younger than timeout) is left alone; an older one is taken over", async () => {
    const young = { ...capRow({ event: 'OrderSubmitted', service: 'messaging', data: { book: 3 } }), status: 'processing', lastAttemptTimestamp: new Date().toISOString() }
    const old = { ...capRow({ event: 'OrderSubmitted', service: 'messaging', data: { book: 4 } }), status: 'processing', lastAttemptTimestamp: new Date(Date.now() - 2 * 3600_000).toISOString() }
    const takenOver = monitor().next('outcome', e => e.ID === old.ID && e.kind === 'succeeded', 10000)
    await INSERT.into(MESSAGES).entries([young, old])
    await takenOver
    await cds.flush()
    const notes = await SELECT.from('CatalogService.Notes').where({ message: { in: ['3', '4'] } })
    expect(notes.map(n => n.message)).toEqual(['4'])
    expect(await rowOf(young.ID)).toMatchObject({ status: 'processing', attempts: 0 })
  })

  test("a copy of a processed row re-inserted from a backup is processed: this process holds no record of the claim in its name", async () => {
    let copy
    await cds.tx(async () => {
      await cds.queued(await cds.connect.to('messaging')).emit('OrderSubmitted', { book: 5 })
      copy = await SELECT.one.from(MESSAGES).where({ msg: { like: '%"book":5%' } })
    })
    await waitFor(async () => !(await rowOf(copy.ID)), { what: 'the original to be processed' })
    expect(copy.status).toBe('processing') // claimed at enqueue by this process
    const again = monitor().next('outcome', e => e.ID === copy.ID && e.kind === 'succeeded', 10000)
    await INSERT.into(MESSAGES).entries(copy)
    await again
    expect((await SELECT.from('CatalogService.Notes').where({ message: '5' })).length).toBe(2)
  })

  test("a copy of a row claimed at enqueue by a process that is gone runs once the enqueue lease (30 s) is over, not after timeout (1 h)", async () => {
    let row
    await cds.tx(async () => {
      await cds.queued(await cds.connect.to('messaging')).emit('OrderSubmitted', { book: 6 })
      row = await SELECT.one.from(MESSAGES).where({ msg: { like: '%"book":6%' } })
      // as another process, gone since, wrote it 29 s ago: rolled back here, re-inserted below
      throw Object.assign(new Error('roll back'), { rollback: true })
    }).catch(e => {
      if (!e.rollback) throw e
    })
    expect(row.claimedBy).toMatch(/:enqueued$/)
    const shift = ts => new Date(Date.parse(ts) - 29_000).toISOString()
    const copy = { ...row, claimedBy: 'gone-host:4711:abcdef:enqueued', claimedAt: shift(row.claimedAt), dueAt: shift(row.dueAt), lastAttemptTimestamp: shift(row.lastAttemptTimestamp) }
    const ran = monitor().next('outcome', e => e.ID === row.ID && e.kind === 'succeeded', 10000)
    await INSERT.into(MESSAGES).entries(copy)
    await ran
    expect((await SELECT.from('CatalogService.Notes').where({ message: '6' })).length).toBe(1)
  })

  test('the operator views and statistics() show the service and event of each message', async () => {
    const ID = await deadOrder(7)
    const [dead] = (await app.axios.get(ours(`/DeadOutboxMessages?$filter=ID eq ${ID}`), OPS)).data.value
    // srv.send('POST', path, data) is CAP's event CREATE
    expect(dead).toMatchObject({ target: 'queue', service: 'ReviewsService', event: 'CREATE' })
    const stats = (await app.axios.get(ours('/statistics()'), OPS)).data.value
    expect(stats).toContainEqual(expect.objectContaining({ queue: 'queue', service: 'ReviewsService', event: 'CREATE', dead: 1 }))
  })

  test('a retry logs one warning line; lastError keeps message and code and a bounded stack without absolute paths of the server', async () => {
    const from = logged.length
    const ID = await deadOrder(8)
    const retries = logged.slice(from).filter(line => line.includes(ID) && line.includes('retrying'))
    expect(retries.length).toBeGreaterThanOrEqual(1)
    for (const line of retries) expect(line.split('\n')).toHaveLength(1)
    const { lastError } = await rowOf(ID)
    expect(lastError).toMatch(/503/)
    expect(lastError).not.toMatch(/[( ]\/[^\s]*\//) // no absolute path
    expect(lastError.split('\n').length).toBeLessThanOrEqual(11)
  })

  test('handlers registered on cds.outbox.Messages see every enqueue as they see CAP\'s: CREATE for calls and events, UPSERT for tasks', async () => {
    const seen = []
    // as @cap-js/telemetry registers them: for the entity's definition (a name would be taken as db.<name>)
    const entity = cds.model.definitions['cds.outbox.Messages']
    cds.db.after(['CREATE', 'UPSERT'], entity, (_, req) => void seen.push([req.event, JSON.parse(req.data.msg).event]))
    await order(9)
    const cats = await cds.connect.to('CatalogService')
    await cats.schedule('nightlyReport').after('1h')
    await cds.flush()
    expect(seen).toEqual(expect.arrayContaining([['CREATE', 'CREATE'], ['CREATE', 'OrderSubmitted'], ['UPSERT', 'nightlyReport']]))
  })
})
