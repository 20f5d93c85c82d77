const { startApp } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES, capRow } = require('../support/outbox')
const { eventQueues } = require('../../lib/plugin')
const cds = require('@sap/cds')

const { OPERATOR_USERS: USERS } = require('../support/operators')
// A long poll interval: a revived message that runs at once was woken, not found by a poll. The statistics behind
// health's lag are read at most once a second.
const app = startApp({
  requires: { auth: { kind: 'mocked', users: USERS }, queue: { pollInterval: '1h', statisticsInterval: '1s' } },
  log: { levels: { odata: 'warn', error: 'error' } }
})

const DLQ = '/odata/v4/event-queues'
const ACTION = 'EventQueuesService'

/** HTTP as `user` (or anonymous), answering every status instead of throwing. */
function http(user) {
  const auth = user ? { username: user, password: USERS[user].password } : undefined
  const options = { auth, validateStatus: () => true }
  return {
    get: url => app.axios.get(DLQ + url, options),
    post: (url, body = {}) => app.axios.post(DLQ + url, body, options)
  }
}
const ops = http('ops')

const row = ID => SELECT.one.from(MESSAGES).where({ ID })
const rows = () => SELECT.from(MESSAGES).orderBy('timestamp')
const eventOf = r => JSON.parse(r.msg).event

/** Enqueues an event in its own committed transaction and returns the new row's ID. */
async function enqueue(srv, event, data = {}) {
  const before = new Set((await rows()).map(r => r.ID))
  await cds.tx(() => cds.queued(srv).emit(event, data))
  const created = (await rows()).filter(r => !before.has(r.ID))
  return created[0].ID
}

const isDead = ID => async () => {
  const r = await row(ID)
  return r && r.dueAt === null && r
}

describe('dead letters', () => {
  let target, named, failing, gate
  const calls = []

  beforeAll(async () => {
    target = await cds.connect.to('Target')
    // `NamedQueue` is on the queue `slowQueue`, which allows 2 attempts; `Target` is on the default queue (10).
    named = cds.unqueued(await cds.connect.to('NamedQueue'))
    target.on('explode', () => {
      throw Object.assign(new Error('the remote system rejected the booking'), { unrecoverable: true })
    })
    target.on('boom', () => {
      throw Object.assign(new Error('boom'), { unrecoverable: true })
    })
    target.on('flaky', () => {
      throw new Error('temporarily unavailable')
    })
    named.on('ping', async req => {
      if (failing) throw new Error(`ping ${req.data.n} failed`)
      await gate
      calls.push(req.data.n)
    })
  })
  beforeEach(() => {
    failing = true
    gate = undefined
    calls.length = 0
  })
  afterEach(async () => {
    await DELETE.from(MESSAGES)
  })

  test('DeadOutboxMessages lists exactly the messages whose attempts reached the maxAttempts of their own queue', async () => {
    const exploded = await enqueue(target, 'explode')
    const pinged = await enqueue(named, 'ping', { n: 1 })
    const flaky = await enqueue(target, 'flaky')
    await waitFor(isDead(exploded), { what: 'the unrecoverable message to be dead' })
    const deadPing = await waitFor(isDead(pinged), { what: 'the slowQueue message to be dead after 2 attempts' })
    const retried = await waitFor(async () => ((await row(flaky)).attempts >= 2 ? row(flaky) : null), { what: '2 attempts of flaky' })

    const res = await ops.get('/DeadOutboxMessages')
    expect(res.status).toBe(200)
    expect(res.data.value.map(m => m.ID).sort()).toEqual([exploded, pinged].sort())
    expect(deadPing.attempts).toBe(2)
    expect(retried.dueAt).not.toBeNull()
    const ping = res.data.value.find(m => m.ID === pinged)
    expect(ping).toMatchObject({ target: 'slowQueue', attempts: 2, lastError: expect.stringContaining('ping 1 failed') })
    expect(JSON.parse(ping.msg)).toMatchObject({ service: 'NamedQueue', event: 'ping', data: { n: 1 } })

    const pending = await ops.get('/PendingOutboxMessages')
    expect(pending.data.value.map(m => m.ID)).toEqual([flaky])
    // flaky goes on failing: on a loaded machine its next attempt may come before the list
    expect(pending.data.value[0]).toMatchObject({ target: 'queue', attempts: expect.any(Number) })
    expect(pending.data.value[0].attempts).toBeGreaterThanOrEqual(retried.attempts)
  })

  test('$filter, $orderby, $top, $skip and $count work on DeadOutboxMessages', async () => {
    const first = await enqueue(target, 'explode')
    const second = await enqueue(target, 'boom')
    const third = await enqueue(named, 'ping', { n: 3 })
    for (const ID of [first, second, third]) await waitFor(isDead(ID), { what: `${ID} to be dead` })

    const filtered = await ops.get(`/DeadOutboxMessages?$filter=target eq 'slowQueue'&$count=true`)
    expect(filtered.data['@odata.count']).toBe(1)
    expect(filtered.data.value[0].ID).toBe(third)

    const paged = await ops.get('/DeadOutboxMessages?$orderby=timestamp desc&$top=1&$skip=1&$count=true')
    expect(paged.data['@odata.count']).toBe(3)
    expect(paged.data.value.map(m => m.ID)).toEqual([second])

    const byAttempts = await ops.get('/DeadOutboxMessages?$filter=attempts ge 10&$orderby=timestamp')
    expect(byAttempts.data.value.map(m => m.ID)).toEqual([first, second])
  })

  test('revive resets the attempts, keeps the last error until the next attempt, and processes the message right away', async () => {
    const ID = await enqueue(named, 'ping', { n: 7 })
    await waitFor(isDead(ID), { what: 'a dead letter' })
    failing = false
    let open
    gate = new Promise(resolve => (open = resolve))

    const res = await ops.post(`/DeadOutboxMessages(${ID})/${ACTION}.revive`)
    expect(res.status).toBe(204)

    const running = await waitFor(async () => {
      const r = await row(ID)
      return r.status === 'processing' && r
    }, { what: 'the revived message to be claimed' })
    expect(running.attempts).toBe(0)
    expect(running.lastError).toContain('ping 7 failed')
    expect((await ops.get('/DeadOutboxMessages')).data.value).toEqual([])

    open()
    await waitFor(async () => !(await row(ID)), { what: 'the revived message to be processed' })
    expect(calls).toEqual([7])
  })

  test('delete removes the dead letter without processing it', async () => {
    const ID = await enqueue(named, 'ping', { n: 8 })
    await waitFor(isDead(ID), { what: 'a dead letter' })
    failing = false

    const res = await ops.post(`/DeadOutboxMessages(${ID})/${ACTION}.delete`)
    expect(res.status).toBe(204)
    expect(await row(ID)).toBeUndefined()
    expect(calls).toEqual([])
  })

  test('reviving or deleting a message that is not a dead letter answers 409, an unknown message 404', async () => {
    const ID = await enqueue(target, 'flaky')
    await waitFor(async () => (await row(ID)).attempts >= 1, { what: 'a failed attempt' })

    for (const action of ['revive', 'delete']) {
      const pending = await ops.post(`/DeadOutboxMessages(${ID})/${ACTION}.${action}`)
      expect(pending.status).toBe(409)
      expect(pending.data.error.message).toMatch(/is not a dead letter/)
      const unknown = await ops.post(`/DeadOutboxMessages(${cds.utils.uuid()})/${ACTION}.${action}`)
      expect(unknown.status).toBe(404)
    }
    expect(await row(ID)).toBeDefined()
  })

  test('reviveAll and deleteAll act on the dead letters that match every given filter', async () => {
    const explode = await enqueue(target, 'explode')
    const boom = await enqueue(target, 'boom')
    const ping = await enqueue(named, 'ping', { n: 9 })
    for (const ID of [explode, boom, ping]) await waitFor(isDead(ID), { what: `${ID} to be dead` })

    const none = await ops.post('/reviveAll', { olderThan: '1h' })
    expect(none.data.value).toBe(0)
    const deleted = await ops.post('/deleteAll', { queue: 'queue', service: 'Target', event: 'boom' })
    expect(deleted.data.value).toBe(1)
    expect(await row(boom)).toBeUndefined()

    failing = false
    const revived = await ops.post('/reviveAll', { service: 'NamedQueue' })
    expect(revived.data.value).toBe(1)
    await waitFor(() => calls.includes(9), { what: 'the revived message to be processed' })
    // the handler has run; its row goes with the commit of its transaction
    await waitFor(async () => !(await row(ping)), { what: 'the revived message\'s row deleted with its commit' })
    expect((await rows()).map(r => r.ID)).toEqual([explode])

    const rest = await ops.post('/deleteAll', {})
    expect(rest.data.value).toBe(1)
    expect(await rows()).toEqual([])
  })

  test('bulk actions reject an invalid olderThan with 400 naming the argument', async () => {
    const res = await ops.post('/reviveAll', { olderThan: 'yesterday' })
    expect(res.status).toBe(400)
    expect(res.data.error.message).toMatch(/olderThan.*"yesterday"/)
  })

  test('statistics reports per queue what is pending, processing and dead, and the relay lag', async () => {
    const dead = await enqueue(named, 'ping', { n: 10 })
    await waitFor(isDead(dead), { what: 'a dead letter' })
    const flaky = await enqueue(target, 'flaky')
    await waitFor(async () => (await row(flaky)).attempts >= 1, { what: 'a failed attempt' })
    failing = false
    let open
    gate = new Promise(resolve => (open = resolve))
    const busy = await enqueue(named, 'ping', { n: 11 })
    await waitFor(async () => (await row(busy)).status === 'processing', { what: 'a message in processing' })

    // flaky goes on failing: read while it waits for its next attempt (on a loaded machine its retry may be running)
    const { res, asked, answered } = await waitFor(async () => {
      const asked = Date.now()
      const res = await ops.get('/statistics()')
      const answered = Date.now()
      const queue = res.data.value?.find(s => s.queue === 'queue')
      return (res.status !== 200 || queue?.processing === 0) && { res, asked, answered }
    }, { what: 'statistics while flaky waits for its next attempt' })
    open()
    expect(res.status).toBe(200)
    const byQueue = Object.fromEntries(res.data.value.map(s => [s.queue, s]))
    expect(byQueue.slowQueue).toMatchObject({ pending: 0, processing: 1, dead: 1 })
    expect(byQueue.queue).toMatchObject({ pending: 1, processing: 0, dead: 0 })
    const enqueued = Date.parse((await row(flaky)).timestamp)
    expect(Math.abs(Date.parse(byQueue.queue.oldestPendingSince) - enqueued)).toBeLessThan(1000)
    // the oldest pending message has waited from its enqueue until the statistics were computed (whole seconds)
    expect(byQueue.queue.relayLag).toBeGreaterThanOrEqual(Math.floor((asked - enqueued) / 1000))
    expect(byQueue.queue.relayLag).toBeLessThanOrEqual(Math.ceil((answered - enqueued) / 1000))
    await waitFor(() => calls.includes(11), { what: 'the processing message to finish' })
  })

  test('a dead letter enqueued an hour ago lags from its revive: statistics, health and the ops page do not jump to its age', async () => {
    const hourAgo = new Date(Date.now() - 3_600_000).toISOString()
    const dead = { ...capRow({ event: 'ping', service: 'NamedQueue', target: 'slowQueue', data: { n: 30 } }), timestamp: hourAgo }
    await INSERT.into(MESSAGES).entries({ ...dead, attempts: 2, lastAttemptTimestamp: hourAgo, lastError: 'ping 30 failed', dueAt: null })
    failing = false
    // the revived message stays pending while the lag is read
    const release = eventQueues().runner.hold()
    try {
      const revivedAt = Date.now()
      expect((await ops.post(`/DeadOutboxMessages(${dead.ID})/${ACTION}.revive`)).status).toBe(204)
      const stats = (await ops.get('/statistics()')).data.value.find(s => s.queue === 'slowQueue')
      expect(stats).toMatchObject({ pending: 1, dead: 0 })
      expect(stats.relayLag).toBeLessThan(60)
      expect(Date.parse(stats.oldestPendingSince)).toBeGreaterThanOrEqual(revivedAt - 1000)
      // the statistics behind health, metrics and the ops page's lag chart, sampled after the revive
      const health = await waitFor(async () => {
        const h = await cds.queued.health({ maxLag: '5m' })
        return Date.parse(h.checks.lag.sampledAt) >= revivedAt && h
      }, { what: 'a lag sample after the revive' })
      expect(health.checks.lag).toMatchObject({ status: 'UP', queue: 'slowQueue' })
      expect(health.checks.lag.relayLag).toBeLessThan(60)
    } finally {
      release()
    }
    await waitFor(() => calls.includes(30), { what: 'the revived message to run' })
  })
})

describe('dead letter service security', () => {
  let ID
  beforeAll(async () => {
    const target = await cds.connect.to('Target')
    ID = await enqueue(target, 'explode', { card: 'secret-payload' })
    await waitFor(isDead(ID), { what: 'a dead letter' })
  })

  test('without credentials every endpoint answers 401 and shows no message content', async () => {
    for (const url of ['/DeadOutboxMessages', '/PendingOutboxMessages', '/statistics()', '/$metadata']) {
      const res = await http().get(url)
      expect(res.status).toBe(401)
      expect(JSON.stringify(res.data)).not.toContain('secret-payload')
    }
    expect((await http().post(`/DeadOutboxMessages(${ID})/${ACTION}.delete`)).status).toBe(401)
    expect(await row(ID)).toBeDefined()
  })

  test('an authenticated user without the internal-user role gets 403 and no message content', async () => {
    const clerk = http('clerk')
    const res = await clerk.get('/DeadOutboxMessages')
    expect(res.status).toBe(403)
    expect(JSON.stringify(res.data)).not.toContain('secret-payload')
    expect((await clerk.post('/deleteAll', {})).status).toBe(403)
    expect(await row(ID)).toBeDefined()
  })

  test('an internal user gets 200 and sees the message', async () => {
    const res = await ops.get('/DeadOutboxMessages')
    expect(res.status).toBe(200)
    expect(res.data.value.map(m => m.msg).join()).toContain('secret-payload')
  })
})
