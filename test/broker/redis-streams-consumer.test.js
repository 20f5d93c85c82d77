const { suiteRedis } = require('./support/redis')
const { startApp } = require('../support/app')
const { waitFor, sleep } = require('../support/wait')
const { MESSAGES } = require('../support/outbox')
const { OPERATOR_USERS: USERS } = require('../support/operators')
const cds = require('@sap/cds')

/**
 * The consuming side of `redis-streams` under what issue 31 found: a live consumer's batch taken over by another
 * consumer of its group (1), an entry the inbox refuses stalling every later one (2), entries trimmed before the group
 * read them (4). Entries are written by the suite's own Redis client, as another app's producer would.
 */
const redis = suiteRedis()
const uri = `redis://127.0.0.1:${redis.port}`
const streams = own => ({ kind: 'redis-streams', credentials: { uri }, ...own })

const app = startApp({
  requires: {
    auth: { kind: 'mocked', users: USERS },
    queue: { backoff: { base: 50, factor: 2, max: 500 }, statisticsInterval: '1s' },
    // two instances of one app: consumers of one group
    sharedA: streams({ group: 'shared-app', consumer: 'shared-a', claimAfter: '1s' }),
    sharedB: streams({ group: 'shared-app', consumer: 'shared-b', claimAfter: '1s' }),
    // an inbox whose queue takes messages of at most 2 KB
    strictInbox: streams({ group: 'strict-app', inboxed: true, outboxed: { maxMessageSize: 2048 } }),
    trimmed: streams({ group: 'trimmed-app' })
  },
  log: { levels: { 'redis-streams': 'error', odata: 'warn' } }
})

let client
beforeAll(async () => {
  client = require('redis').createClient({ url: redis.url })
  client.on('error', () => {})
  await client.connect()
})
afterAll(() => client?.destroy())

const entry = (stream, message) => ['XADD', stream, '*', 'message', JSON.stringify(message)]
const pending = async (stream, group) => Number((await client.sendCommand(['XPENDING', stream, group]))[0])
const groupExists = async (stream, group) => (await client.sendCommand(['XINFO', 'GROUPS', stream]).catch(() => [])).some(g => JSON.stringify(g).includes(`"${group}"`))

const EVENT_QUEUES = '/odata/v4/event-queues'
const ops = {
  get: url => app.axios.get(EVENT_QUEUES + url, { auth: { username: 'ops', password: 'ops' }, validateStatus: () => true }),
  post: url => app.axios.post(EVENT_QUEUES + url, {}, { auth: { username: 'ops', password: 'ops' }, validateStatus: () => true })
}

describe('redis-streams: consuming', () => {
  test("a live consumer's batch is not taken over by another consumer of its group while it works through it: each entry is handled once", async () => {
    const handled = []
    for (const name of ['sharedA', 'sharedB']) {
      const srv = await cds.connect.to(name)
      srv.on('slow/work', async msg => {
        handled.push({ by: name, n: msg.data.n })
        await sleep(300) // 20 entries take 6 s, claimAfter is 1 s
      })
    }
    await waitFor(() => groupExists('slow/work', 'shared-app'), { what: "the app's group" })
    // one transaction: the first blocked read takes what it may of all 20 at once
    const multi = client.multi()
    for (let n = 1; n <= 20; n++) multi.addCommand(entry('slow/work', { data: { n } }))
    await multi.exec()
    await waitFor(async () => new Set(handled.map(h => h.n)).size === 20 && (await pending('slow/work', 'shared-app')) === 0, { timeout: 60000, what: 'every entry handled and acknowledged' })
    const twice = handled.filter((h, i) => handled.findIndex(o => o.n === h.n) !== i)
    expect(twice).toEqual([])
  })

  test('entries the inbox refuses (too large, an invalid ordering key) become dead letters an operator sees, revives and deletes; the entries behind them are handled', async () => {
    const inbox = await cds.connect.to('strictInbox')
    const handled = []
    inbox.on('strict/a', msg => void handled.push(msg.data.n))
    inbox.on('strict/b', msg => void handled.push(msg.data.n))
    await waitFor(async () => (await groupExists('strict/a', 'strict-app')) && (await groupExists('strict/b', 'strict-app')), { what: "the app's groups" })
    await client.sendCommand(entry('strict/a', { data: { n: 1, text: 'x'.repeat(4000) }, id: 'too-large' }))
    await client.sendCommand(entry('strict/a', { data: { n: 2 }, id: 'no-key', 'x-ordering-key': '' }))
    for (let n = 3; n <= 7; n++) await client.sendCommand(entry(n % 2 ? 'strict/a' : 'strict/b', { data: { n }, id: `ok-${n}` }))

    await waitFor(() => handled.length === 5, { timeout: 30000, what: 'the five entries behind the refused ones' })
    expect(handled.sort()).toEqual([3, 4, 5, 6, 7])
    await waitFor(async () => (await pending('strict/a', 'strict-app')) + (await pending('strict/b', 'strict-app')) === 0, { what: 'every entry acknowledged' })

    // the operator sees both, with why they were refused
    const dead = (await ops.get('/DeadOutboxMessages?$orderby=timestamp')).data.value
    expect(dead.map(d => d.target)).toEqual(['strictInbox', 'strictInbox'])
    expect(dead[0].lastError).toMatch(/maxMessageSize of 2048 bytes/)
    expect(dead[1].lastError).toMatch(/Invalid header x-ordering-key/)
    await waitFor(async () => (await ops.get('/statistics()')).data.value?.find(s => s.queue === 'strictInbox')?.dead === 2, { what: 'two dead letters in the statistics' })

    // reviving one hands it to the subscriber (as it came, unordered); deleting the other removes it
    expect((await ops.post(`/DeadOutboxMessages(${dead[0].ID})/EventQueuesService.revive`)).status).toBe(204)
    await waitFor(() => handled.includes(1), { what: 'the revived message at the subscriber' })
    expect((await ops.post(`/DeadOutboxMessages(${dead[1].ID})/EventQueuesService.delete`)).status).toBe(204)
    await waitFor(async () => (await SELECT.from(MESSAGES).where({ target: 'strictInbox' })).length === 0, { what: 'the inbox empty' })
    expect(handled.filter(n => n === 2)).toEqual([])

    // a redelivery of a refused message is a duplicate, not a second dead letter
    await client.sendCommand(entry('strict/a', { data: { n: 2 }, id: 'no-key', 'x-ordering-key': '' }))
    await client.sendCommand(entry('strict/a', { data: { n: 8 }, id: 'ok-8' }))
    await waitFor(async () => handled.includes(8) && (await SELECT.from(MESSAGES).where({ target: 'strictInbox' })).length === 0, { what: 'the entry after the redelivery, and the inbox empty' })
    // its receipt: the id within its topic (no CloudEvents source)
    expect(await SELECT.one.from('cds.outbox.Receipts').where({ ID: JSON.stringify({ topic: 'strict/a', id: 'no-key' }) })).toMatchObject({ duplicates: 1 })
  })

  test('entries trimmed from the stream before the group read them are reported as an error with how many were lost', async () => {
    const srv = await cds.connect.to('trimmed')
    const LOG = cds.log('redis-streams')
    const errors = []
    const spy = jest.spyOn(LOG, 'error').mockImplementation((...args) => void errors.push(args.map(String).join(' ')))
    try {
      // the app's consumer is held up on its first entry while 1,000 entries are published with maxLength 100
      let release
      const held = new Promise(resolve => (release = resolve))
      const handled = []
      srv.on('trimmed/s', async msg => {
        handled.push(msg.data.n)
        if (handled.length === 1) await held
      })
      await waitFor(() => groupExists('trimmed/s', 'trimmed-app'), { what: "the app's group" })
      for (let n = 1; n <= 1000; n++) await client.sendCommand(['XADD', 'trimmed/s', 'MAXLEN', '~', '100', '*', 'message', JSON.stringify({ data: { n } })])
      await waitFor(() => handled.length === 1, { what: 'the first entry in hand' })
      release()
      await waitFor(async () => handled.includes(1000) && (await pending('trimmed/s', 'trimmed-app')) === 0, { timeout: 30000, what: 'the entries left in the stream' })
      const lost = errors.find(line => line.includes('trimmed/s'))
      expect(lost).toBeDefined()
      expect(lost).toContain(`${1000 - handled.length} entries were trimmed from the stream before group trimmed-app read them`)
    } finally {
      spy.mockRestore()
    }
  })
})
