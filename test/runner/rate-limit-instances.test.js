const http = require('http')
const { startInstances, stopInstance } = require('../support/instances')
const { sharedDatabase, query } = require('../support/shared-database')
const { waitFor } = require('../support/wait')

/**
 * `rateLimit` across instances: three app processes on one database (a SQLite file, or PostgreSQL; the native and
 * the portable store) share their queue's window, so a remote system sees `count` calls per `per` from all of them
 * together, not from each. The remote system is a local HTTP server that counts the calls it gets.
 */

/** A remote system on 127.0.0.1 that records when each call arrived and from which instance. */
async function countingRemote() {
  const calls = []
  const server = http.createServer((req, res) => {
    let body = ''
    req.on('data', chunk => (body += chunk))
    req.on('end', () => {
      calls.push({ at: Date.now(), ...JSON.parse(body) })
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    })
  })
  await new Promise(resolve => server.listen(0, '127.0.0.1', resolve))
  const url = `http://127.0.0.1:${server.address().port}/call`
  return { url, calls, close: () => new Promise(resolve => { server.closeAllConnections(); server.close(resolve) }) }
}

/** The most calls of `calls` within any `per` ms: a sliding window, as the limit promises, and fixed windows from the first call. */
function perWindow(calls, per) {
  const times = calls.map(c => c.at).sort((a, b) => a - b)
  let sliding = 0
  for (let i = 0, j = 0; i < times.length; i++) {
    while (times[i] - times[j] >= per) j++
    sliding = Math.max(sliding, i - j + 1)
  }
  const fixed = new Map()
  for (const at of times) fixed.set(Math.floor((at - times[0]) / per), (fixed.get(Math.floor((at - times[0]) / per)) ?? 0) + 1)
  return { sliding, fixed: Math.max(0, ...fixed.values()) }
}

const post = (instance, path, body) =>
  fetch(`${instance.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }).then(async res => {
    if (!res.ok) throw new Error(`POST ${path} on instance ${instance.pid}: ${res.status} ${await res.text()}`)
    return res.json()
  })

/**
 * Three instances on a database of their own, their default queue limited by `rateLimit`, calling `remote`;
 * `clockSkew`: how far each one's clock is off (ms, by name).
 */
function instancesWith(rateLimit, clockSkew = {}) {
  const state = { instances: [], remote: undefined, database: undefined }
  beforeAll(async () => {
    state.remote = await countingRemote()
    state.database = await sharedDatabase()
    const options = name => ({ name, queue: { rateLimit, pollInterval: '500ms' }, env: { REMOTE_URL: state.remote.url }, clockSkew: clockSkew[name] })
    state.instances = await startInstances(state.database, ['A', 'B', 'C'].map(options))
  }, 120000)
  afterAll(async () => {
    await Promise.all(state.instances.map(child => stopInstance(child)))
    await state.remote?.close()
  })
  return state
}

const QUEUE_ROWS = 'SELECT attempts AS "attempts", status AS "status" FROM cds_outbox_Messages'

/** Waits until 15 of the 20 messages wait in `state`'s table, none of them attempted. */
const fifteenWaiting = state => waitFor(async () => {
  const rows = await query(state.database, QUEUE_ROWS)
  return rows.filter(r => Number(r.attempts) === 0 && r.status === null).length === 15
}, { timeout: 30000, what: '15 messages waiting, none attempted' })

describe('rateLimit across instances', () => {
  describe('count 5 per hour', () => {
    const state = instancesWith({ count: 5, per: '1h' })

    test('three instances start 5 messages between them within the period; the others stay in the table, unattempted', async () => {
      const [A, B, C] = state.instances
      await post(A, '/enqueue', { from: 0, count: 20, event: 'call' })
      // each instance processes what it may: a limit per process would let each start 5
      await Promise.all([A, B, C].map(instance => post(instance, '/flush', {})))
      expect(state.remote.calls).toHaveLength(5)
      // A poll of another instance may hold some of them for a moment: it hands them back unstarted. (A started one may
      // still fail after its call, e.g. when its transaction gets no pooled connection in time on a loaded machine.)
      await fifteenWaiting(state)
      expect(state.remote.calls).toHaveLength(5)
    }, 180000)
  })

  describe('count 5 per hour, an instance whose clock is 2 hours behind', () => {
    const state = instancesWith({ count: 5, per: '1h' }, { C: -2 * 3600_000 })

    test('the window is the database\'s time: what the instance behind started counts for the others, and theirs for it', async () => {
      const [A, B, C] = state.instances
      // the instance behind takes its starts first (its commit wakes its runner); by its own clock they would be over
      // an hour old for the others
      await post(C, '/enqueue', { from: 0, count: 20, event: 'call' })
      await post(C, '/flush', {})
      await Promise.all([A, B].map(instance => post(instance, '/flush', {})))
      expect(state.remote.calls).toHaveLength(5)
      await fifteenWaiting(state)
      expect(state.remote.calls).toHaveLength(5)
    }, 180000)
  })

  describe('count 2 per second', () => {
    const PER = 1000
    const state = instancesWith({ count: 2, per: PER })

    test('the window moves on for all instances together: 18 messages take at least 8 periods', async () => {
      const [A] = state.instances
      const enqueued = Date.now()
      await post(A, '/enqueue', { from: 0, count: 18, event: 'call' })
      // A started message may fail after its call (its transaction got no pooled connection in time on a loaded
      // machine) and call again on its retry, a start of its own from the window: at least once, never one attempt twice.
      const called = () => new Set(state.remote.calls.map(c => c.n)).size
      await waitFor(() => called() >= 18, { timeout: 120000, interval: 100, what: '18 messages calling the remote system' })
      // the ninth pair of starts comes 8 periods after the first at the earliest, whoever takes them; calls only later
      const last = Math.max(...state.remote.calls.map(c => c.at))
      expect(last - enqueued).toBeGreaterThanOrEqual(8 * PER)
      expect(new Set(state.remote.calls.map(c => `${c.n}/${c.attempt}`)).size).toBe(state.remote.calls.length)
      const { sliding, fixed } = perWindow(state.remote.calls, PER)
      const by = ['A', 'B', 'C'].map(name => `${name}=${state.remote.calls.filter(c => c.instance === name).length}`)
      console.log(`count 2 per ${PER} ms, 3 instances: at most ${sliding} calls within any ${PER} ms at the remote system, ${fixed} in a fixed window; calls per instance ${by.join(', ')}; retries ${state.remote.calls.length - 18}`)
    }, 180000)
  })
})
