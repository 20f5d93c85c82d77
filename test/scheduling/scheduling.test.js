const { startApp } = require('../support/app')
const { waitFor, sleep } = require('../support/wait')
const { MESSAGES, millis, capRow } = require('../support/outbox')
const { countStatements } = require('../support/statements')
const cds = require('@sap/cds')

const POLL = 200
startApp({
  requires: {
    queue: { pollInterval: `${POLL}ms`, maxAttempts: 2, backoff: { base: '100ms' } },
    OwnQueue: { outboxed: { timezone: 'Asia/Tokyo' } }
  }
})

const HOUR = 3_600_000
const DAY = 24 * HOUR

/** CAP 10's task IDs, computed with its own `deterministic_uuid` (libx/queue/utils.js) for these inputs. */
const CAP10_ID = {
  'Target:tick': 'fa13f121-dbfe-4f85-9843-9da13f3feb46'
}

/** CAP 10's `deterministic_uuid` (libx/queue/utils.js): the ID its built-in queue gives the task `input` names. */
function capTaskId(input) {
  const hash = require('crypto').createHash('sha256').update(input).digest()
  hash[6] = (hash[6] & 0x0f) | 0x40
  hash[8] = (hash[8] & 0x3f) | 0x80
  const hex = hash.toString('hex')
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`
}

const tasks = () => SELECT.from(MESSAGES).where('task is not null').orderBy('task')
const taskRow = task => SELECT.one.from(MESSAGES).where({ task })
const queueOf = row => JSON.parse(row.msg).queue

/** Next local (process time zone) 09:00 strictly after `t`. */
function nextLocalNine(t) {
  const d = new Date(t)
  d.setHours(9, 0, 0, 0)
  if (d.getTime() <= t) d.setDate(d.getDate() + 1)
  return d.getTime()
}

/** Runs `fn` and returns [start, end] epoch ms around it, for due times computed during the call. */
async function timed(fn) {
  const start = Date.now()
  await fn()
  return [start, Date.now()]
}

describe('scheduling', () => {
  let srv
  const runs = []
  const gates = new Map()
  /** A handler blocked until `release(name)`, so a test can act while an occurrence runs. */
  const gate = name => new Promise(resolve => gates.set(name, resolve))
  const release = name => gates.get(name)?.()
  const runsOf = event => runs.filter(r => r.event === event)

  beforeAll(async () => {
    srv = await cds.connect.to('Target')
    for (const event of ['tick', 'replicate', 'slow', 'chain', 'far', 'monthly']) {
      srv.on(event, async req => {
        const run = { event, task: req.queue.task, data: req.data, headers: req.headers, queue: req.queue, start: Date.now() }
        runs.push(run)
        if (req.data?.wait) await gate(req.data.wait)
        if (req.data?.record) await INSERT.into('Target.Records').entries({ ID: cds.utils.uuid(), kind: event, message: req.data.record })
        if (req.data?.sleep) await sleep(req.data.sleep)
        run.end = Date.now()
      })
    }
  })

  afterEach(async () => {
    for (const resolve of gates.values()) resolve()
    gates.clear()
    await DELETE.from(MESSAGES)
    await DELETE.from('Target.Records')
    runs.length = 0
  })

  describe('API', () => {
    test('srv.schedule accepts the argument forms of send: event/data/headers, an event object, and a query', async () => {
      await srv.schedule('tick', { form: 'args' }, { 'x-form': 'args' }).as('args')
      await srv.schedule({ event: 'tick', data: { form: 'object' }, headers: { 'x-form': 'object' } }).as('object')
      await srv.schedule(INSERT.into('Target.Records').entries({ ID: cds.utils.uuid(), kind: 'query' })).as('query')
      await waitFor(async () => runs.length === 2 && (await SELECT.from('Target.Records')).length === 1, { what: 'three tasks' })
      expect(runs.map(r => [r.task, r.data, r.headers['x-form']]).sort()).toEqual([
        ['args', { form: 'args' }, 'args'],
        ['object', { form: 'object' }, 'object']
      ])
      expect(await SELECT.from('Target.Records')).toMatchObject([{ kind: 'query' }])
      expect(await tasks()).toHaveLength(0)
    })

    test('the builder writes nothing until it is awaited, and awaiting it twice writes once', async () => {
      const builder = srv.schedule('tick', { n: 1 }).after('1h')
      // a round trip to the database: an eager write, sent before it, would be visible now
      expect(await tasks()).toHaveLength(0)
      await builder
      await builder
      expect(await tasks()).toMatchObject([{ task: 'tick' }])
    })

    test('the task is written in the current transaction: a rollback leaves no task', async () => {
      await expect(
        cds.tx(async () => {
          await srv.schedule('tick').after('1h')
          expect(await tasks()).toHaveLength(1)
          throw new Error('rollback')
        })
      ).rejects.toThrow('rollback')
      expect(await tasks()).toHaveLength(0)
    })

    test('.after, .every and .as can be called in any order and store CAP\'s msg.queue shape', async () => {
      await srv.schedule('tick').every('1h').after('2h').as('one')
      await srv.schedule('tick').as('two').after('2h').every('1h')
      await srv.schedule('tick').after(7_200_000).as('three').every(HOUR)
      const rows = await tasks()
      expect(rows.map(r => [r.task, queueOf(r)])).toEqual(
        ['one', 'three', 'two'].map(task => [task, { task, after: 2 * HOUR, every: HOUR }])
      )
    })

    test('a task row has CAP 10\'s deterministic ID from service and task name (test/api/appid.test.js: plus appid)', async () => {
      await srv.schedule('tick').after('1h')
      expect((await taskRow('tick')).ID).toBe(CAP10_ID['Target:tick'])
      expect(await srv.unschedule('tick')).toBe(1)
    })

    test("tasks of services whose names contain ':' never replace each other: Shop + 'orders:nightly' and Shop:orders + 'nightly'", async () => {
      const shop = new cds.Service('Shop')
      const shopOrders = new cds.Service('Shop:orders')
      await shop.schedule('report', { of: 'Shop' }).as('orders:nightly').after('1h')
      await shopOrders.schedule('report', { of: 'Shop:orders' }).as('nightly').after('1h')
      const rows = await tasks()
      expect(rows.map(r => [r.service, r.task, JSON.parse(r.msg).data.of])).toEqual([
        ['Shop:orders', 'nightly', 'Shop:orders'],
        ['Shop', 'orders:nightly', 'Shop']
      ])
      expect(new Set(rows.map(r => r.ID)).size).toBe(2)
      // rescheduling and unscheduling find each one's own row
      await shopOrders.schedule('report', { of: 'Shop:orders again' }).as('nightly').after('1h')
      expect(await shop.unschedule('orders:nightly')).toBe(1)
      expect((await tasks()).map(r => [r.service, r.task, JSON.parse(r.msg).data.of])).toEqual([['Shop:orders', 'nightly', 'Shop:orders again']])
      expect(await shopOrders.unschedule('nightly')).toBe(1)
    })

    test("a task named with ':' that CAP's built-in queue registered is replaced, not duplicated, and unscheduled", async () => {
      // due in an hour, so that it is not run meanwhile
      const inAnHour = new Date(Date.now() + HOUR)
      const row = { ...capRow({ event: 'tick', data: { by: 'CAP' } }), ID: capTaskId('Target:orders:nightly'), task: 'orders:nightly', timestamp: inAnHour.toISOString(), dueAt: inAnHour }
      await INSERT.into(MESSAGES).entries(row)
      await srv.schedule('tick', { by: 'plugin' }).as('orders:nightly').after('1h')
      expect((await tasks()).map(r => [r.task, JSON.parse(r.msg).data.by])).toEqual([['orders:nightly', 'plugin']])
      await INSERT.into(MESSAGES).entries({ ...row, ID: capTaskId('Target:orders:nightly') })
      expect(await srv.unschedule('orders:nightly')).toBe(2)
      expect(await tasks()).toEqual([])
    })

    test('task names are measured in characters and may not contain NUL, with the same clear error on every database', async () => {
      await srv.schedule('tick').as('🕐'.repeat(255)).after('1h')
      expect((await tasks()).map(r => r.task)).toEqual(['🕐'.repeat(255)])
      expect(() => srv.schedule('tick').as('🕐'.repeat(256))).toThrow(/^Invalid task name of Target\.schedule\("tick"\)\.as\(\): "(?:🕐)+"\. Expected a non-empty task name of at most 255 characters without NUL characters\.$/)
      expect(() => srv.schedule('tick').as('nightly\u0000')).toThrow('Invalid task name of Target.schedule("tick").as(): "nightly\\u0000". Expected a non-empty task name')
      await expect(srv.unschedule('nightly\u0000')).rejects.toThrow('Invalid task name of Target.unschedule(): "nightly\\u0000"')
      expect(await srv.unschedule('🕐'.repeat(255))).toBe(1)
    })

    test('a task named after its event, by default, follows the same rule: a long or NUL event name fails at the call', async () => {
      const long = 'replicate'.repeat(30)
      await expect(srv.schedule(long).after('1h')).rejects.toThrow(
        `Invalid task name (the event name) of Target.schedule(...): "${long}". Expected a non-empty task name of at most 255 characters without NUL characters; name it with .as(name).`
      )
      await expect(srv.schedule('tick\u0000').after('1h')).rejects.toThrow('Invalid task name (the event name) of Target.schedule(...): "tick\\u0000"')
      expect(await tasks()).toEqual([])
    })

    test('schedule and unschedule work the same on the queued proxy, and CAP 9\'s schedule.task / asTask / unschedule.task are aliases', async () => {
      await cds.queued(srv).schedule('tick', { via: 'proxy' }).after('1h')
      await srv.schedule.task('tick', { via: 'schedule.task' }).after('1h')
      await srv.schedule('tick', { via: 'asTask' }).asTask('named').after('1h')
      const rows = await tasks()
      expect(rows.map(r => [r.task, JSON.parse(r.msg).data.via])).toEqual([['named', 'asTask'], ['tick', 'schedule.task']])
      expect(await srv.unschedule.task('named')).toBe(1)
      expect(await cds.queued(srv).unschedule('tick')).toBe(1)
      expect(await tasks()).toHaveLength(0)
    })
  })

  describe('durations', () => {
    const forms = [
      [500, 500], ['500ms', 500], ['1s', 1000], ['10m', 600_000], ['1h', HOUR], ['2d', 2 * DAY], ['1w', 7 * DAY],
      ['10 minutes', 600_000], ['1.5h', 90 * 60_000], ['1h30m', 90 * 60_000]
    ]

    test.each(forms)('.after(%j) delays the first run by %d ms', async (value, ms) => {
      const [start, end] = await timed(() => srv.schedule('tick').after(value))
      const row = await taskRow('tick')
      expect(queueOf(row).after).toBe(ms)
      expect(millis(row.dueAt)).toBeGreaterThanOrEqual(start + ms)
      expect(millis(row.dueAt)).toBeLessThanOrEqual(end + ms)
    })

    test.each(forms)('.every(%j) repeats every %d ms', async (value, ms) => {
      await srv.schedule('tick').every(value).after('1h')
      expect(queueOf(await taskRow('tick')).every).toBe(ms)
    })

    test("CAP's (value, unit) form is accepted: .after(5, 'minutes')", async () => {
      await srv.schedule('tick').after(5, 'minutes').every(1.5, 'h')
      expect(queueOf(await taskRow('tick'))).toMatchObject({ after: 300_000, every: 90 * 60_000 })
    })

    test.each([['soon', '"soon"'], ['-5m', '"-5m"'], [NaN, 'NaN'], ['1x', '"1x"'], ['', '""'], [null, 'null'], [{}, '{}']])(
      '.after(%p) throws at the call, naming the value and the accepted forms',
      (value, shown) => {
        const call = () => srv.schedule('tick').after(value)
        expect(call).toThrow(expect.objectContaining({ code: 'INVALID_QUEUE_INPUT' }))
        expect(call).toThrow(`Invalid delay of Target.schedule("tick").after(): ${shown}. Expected a number of milliseconds >= 0`)
        expect(call).toThrow("a string like '500ms', '1s', '10m', '1.5h'")
      }
    )

    test.each(['soon', '-5m', NaN, '1x', 0, '0s'])('.every(%p) throws at the call, naming duration and cron forms', value => {
      const call = () => srv.schedule('tick').every(value)
      expect(call).toThrow('Invalid interval of Target.schedule("tick").every()')
      expect(call).toThrow('an interval > 0')
      expect(call).toThrow('five fields (minute hour day-of-month month day-of-week')
    })

    test('a failed call writes nothing', async () => {
      await expect(async () => await srv.schedule('tick').after('soon')).rejects.toThrow('Invalid delay')
      expect(await tasks()).toHaveLength(0)
    })
  })

  describe('cron', () => {
    const { CronExpressionParser } = require('cron-parser')
    const fire = (expression, after, tz) => CronExpressionParser.parse(expression, { currentDate: new Date(after), ...(tz && { tz }) }).next().getTime()

    test.each([
      ['*/10 * * * *'], ['0 9 * * MON-FRI'], ['0 0 1 JAN *'], ['@hourly'], ['*/30 * * * * *'], ['15 */5 * * * *']
    ])('.every(%j) is stored as cron; the first run is due at its next fire time', async expression => {
      const [start, end] = await timed(() => srv.schedule('tick').every(expression))
      const row = await taskRow('tick')
      expect(queueOf(row)).toEqual({ task: 'tick', every: expression })
      expect([fire(expression, start), fire(expression, end)]).toContain(millis(row.dueAt))
    })

    test('with .after as well, the first run is the first fire time after the delay', async () => {
      const [start, end] = await timed(() => srv.schedule('tick').every('0 9 * * *').after('2d'))
      const due = millis((await taskRow('tick')).dueAt)
      expect([nextLocalNine(start + 2 * DAY), nextLocalNine(end + 2 * DAY)]).toContain(due)
    })

    test.each([
      ['61 * * * *', 'Constraint error, got value 61 expected range 0-59'],
      ['0 9 * * MOON', 'cannot resolve alias'],
      ['0 0 30 2 *', 'Invalid explicit day of month definition'],
      ['@reboot', 'cannot resolve alias']
    ])('.every(%j) throws at the call with the parser\'s reason', (expression, reason) => {
      const call = () => srv.schedule('tick').every(expression)
      expect(call).toThrow(`Invalid interval of Target.schedule("tick").every(): ${JSON.stringify(expression)}`)
      expect(call).toThrow(reason)
    })

    test('cron with more or fewer fields than five or six is refused', () => {
      expect(() => srv.schedule('tick').every('* * * * * * *')).toThrow('Invalid interval')
      expect(() => srv.schedule('tick').every('0 9 *')).toThrow('Invalid interval')
    })

    test('cron fire times use the process time zone by default and the queue\'s `timezone` option when set', async () => {
      const own = await cds.connect.to('OwnQueue')
      const [start, end] = await timed(async () => {
        await srv.schedule('tick').every('0 9 * * *')
        await own.schedule('tick').every('0 9 * * *')
      })
      const rows = await SELECT.from(MESSAGES).where({ task: 'tick' })
      const local = rows.find(r => r.target === 'queue')
      const tokyo = rows.find(r => r.target === 'OwnQueue')
      expect([nextLocalNine(start), nextLocalNine(end)]).toContain(millis(local.dueAt))
      // 09:00 in Tokyo (UTC+9, no daylight saving time) is 00:00 UTC
      const midnightUTC = t => Math.floor(t / DAY) * DAY + DAY
      expect([midnightUTC(start), midnightUTC(end)]).toContain(millis(tokyo.dueAt))
      expect([fire('0 9 * * *', start, 'Asia/Tokyo'), fire('0 9 * * *', end, 'Asia/Tokyo')]).toContain(millis(tokyo.dueAt))
    })

    test('an unknown time zone fails configuration, naming the option', () => {
      const { compileQueue } = require('../../lib/config/queue')
      expect(() => compileQueue('q', { timezone: 'Mars/Olympus' }, 'cds.requires.queue')).toThrow(
        `Invalid cds.requires.queue.timezone: "Mars/Olympus". Expected an IANA time zone name like 'UTC' or 'Europe/Berlin'.`
      )
    })

    test('a cron task recurs: after each run it is due at the next fire time after that run', async () => {
      await srv.schedule('tick', { n: 1 }).every('* * * * * *')
      await waitFor(() => runsOf('tick').length >= 2, { what: 'two runs of a per-second cron task' })
      const [first] = runsOf('tick')
      // between its handler's end and its commit, a run's row is still claimed (`dueAt` is then its lease)
      const row = await waitFor(async () => { const r = await taskRow('tick'); return r.status !== 'processing' && r }, { what: 'the row between two runs' })
      const due = millis(row.dueAt)
      expect(due % 1000).toBe(0)
      expect(due).toBeGreaterThan(first.end)
      expect(queueOf(row).every).toBe('* * * * * *')
    })
  })

  describe('recurrence', () => {
    test('a singleton task: scheduling again replaces payload, headers and timing and resets failure state', async () => {
      await srv.schedule('tick', { v: 1 }, { 'x-v': '1' }).every('1h').after('1h')
      const before = await taskRow('tick')
      await UPDATE(MESSAGES).set({ attempts: 1, lastError: 'boom' }).where({ ID: before.ID })
      const [start] = await timed(() => srv.schedule('tick', { v: 2 }, { 'x-v': '2' }).every('2h').after('3h'))
      const rows = await tasks()
      expect(rows).toHaveLength(1)
      const [after] = rows
      expect(after).toMatchObject({ ID: before.ID, attempts: 0, lastError: null, status: null, claimedBy: null })
      expect(JSON.parse(after.msg)).toMatchObject({ data: { v: 2 }, headers: { 'x-v': '2' }, queue: { task: 'tick', every: 2 * HOUR, after: 3 * HOUR } })
      expect(millis(after.dueAt)).toBeGreaterThanOrEqual(start + 3 * HOUR)
    })

    test('a task that CAP\'s built-in queue registered is replaced, not duplicated', async () => {
      const msg = { 'cds.internal.user': 'cap', service: 'Target', context: {}, event: 'tick', data: { from: 'cap' }, queue: { task: 'tick', every: 60000 } }
      await INSERT.into(MESSAGES).entries({ ID: CAP10_ID['Target:tick'], timestamp: new Date(Date.now() + HOUR).toISOString(), target: 'Target', msg: JSON.stringify(msg), task: 'tick' })
      await srv.schedule('tick', { from: 'plugin' }).every('1h').after('1h')
      const rows = await tasks()
      expect(rows).toHaveLength(1)
      expect(JSON.parse(rows[0].msg).data).toEqual({ from: 'plugin' })
    })

    test('.as gives independent tasks of the same event, each with its own payload and schedule', async () => {
      await srv.schedule('replicate', { entity: 'Airports' }).every('300ms').as('replicate-airports')
      await srv.schedule('replicate', { entity: 'Airlines' }).every('1h').as('replicate-airlines')
      await waitFor(() => runsOf('replicate').filter(r => r.task === 'replicate-airports').length >= 2, { what: 'airports twice' })
      expect(runsOf('replicate').filter(r => r.task === 'replicate-airlines').map(r => r.data)).toEqual([{ entity: 'Airlines' }])
      expect(new Set(runsOf('replicate').filter(r => r.task === 'replicate-airports').map(r => r.data.entity))).toEqual(new Set(['Airports']))
      expect((await tasks()).map(r => r.task)).toEqual(['replicate-airlines', 'replicate-airports'])
      expect(await srv.unschedule('replicate-airports')).toBe(1)
      expect((await tasks()).map(r => r.task)).toEqual(['replicate-airlines'])
    })

    test('a task without .every runs once and is removed', async () => {
      await srv.schedule('tick', { once: true })
      await waitFor(() => runsOf('tick').length === 1, { what: 'one run' })
      await cds.flush()
      expect(await tasks()).toHaveLength(0)
    })

    test('the interval is counted from the end of the previous successful run', async () => {
      await srv.schedule('tick', { sleep: 300 }).every('200ms')
      await waitFor(() => runsOf('tick').length >= 3, { what: 'three runs' })
      const [first, second, third] = runsOf('tick')
      // a rate of one run per 200 ms would start the next run while this one still sleeps 300 ms
      expect(second.start - first.end).toBeGreaterThanOrEqual(200)
      expect(third.start - second.end).toBeGreaterThanOrEqual(200)
    })

    test('the next occurrence is written in the transaction that completes the current one', async () => {
      await srv.schedule('tick', { wait: 'tx', record: 'occurrence' }).every('1h')
      await waitFor(() => gates.has('tx'), { what: 'the occurrence to run' })
      const claimed = await taskRow('tick')
      expect(claimed.status).toBe('processing')
      const [, end] = await timed(async () => {
        release('tx')
        await waitFor(async () => (await taskRow('tick')).status === null, { what: 'the completion' })
      })
      const next = await taskRow('tick')
      expect(next).toMatchObject({ ID: claimed.ID, attempts: 0, claimedBy: null })
      expect(millis(next.dueAt)).toBeGreaterThanOrEqual(runsOf('tick')[0].end + HOUR)
      expect(millis(next.dueAt)).toBeLessThanOrEqual(end + HOUR)
      // the handler's write and the move to the next occurrence became visible together
      expect(await SELECT.from('Target.Records')).toMatchObject([{ message: 'occurrence' }])
    })
  })

  describe('unschedule', () => {
    test('removes the task and resolves to the number of tasks removed; unknown names are a no-op', async () => {
      await srv.schedule('tick').every('1h').after('1h')
      expect(await srv.unschedule('tick')).toBe(1)
      expect(await srv.unschedule('tick')).toBe(0)
      expect(await srv.unschedule('never-scheduled')).toBe(0)
      expect(await tasks()).toHaveLength(0)
    })

    test('rejects a missing task name with a clear error', async () => {
      await expect(srv.unschedule()).rejects.toThrow('Invalid task name of Target.unschedule(): undefined')
    })

    test('is part of the current transaction: a rollback keeps the task', async () => {
      await srv.schedule('tick').after('1h')
      await expect(
        cds.tx(async () => {
          expect(await srv.unschedule('tick')).toBe(1)
          throw new Error('rollback')
        })
      ).rejects.toThrow('rollback')
      expect(await tasks()).toHaveLength(1)
    })

    test('a run in progress completes and commits its work, but the task does not recur', async () => {
      await srv.schedule('slow', { wait: 'slow', record: 'unscheduled-run' }).every('200ms')
      await waitFor(() => gates.has('slow'), { what: 'the run to start' })
      expect(await srv.unschedule('slow')).toBe(1)
      release('slow')
      await waitFor(async () => (await SELECT.from('Target.Records')).length === 1, { what: 'the run to commit' })
      await sleep(4 * POLL)
      expect(runsOf('slow')).toHaveLength(1)
      expect(await tasks()).toHaveLength(0)
    })
  })

  describe('rescheduling while an occurrence runs', () => {
    test('the new payload and timing win, the running occurrence completes, exactly one chain continues', async () => {
      await srv.schedule('chain', { v: 1, wait: 'chain', record: 'v1' }).every('200ms')
      await waitFor(() => gates.has('chain'), { what: 'the first run' })
      await srv.schedule('chain', { v: 2 }).every('300ms')
      await waitFor(() => runsOf('chain').some(r => r.data.v === 2), { what: 'the new schedule to run' })
      release('chain')
      await waitFor(() => runsOf('chain').filter(r => r.data.v === 2).length >= 4, { what: 'four runs of the new schedule' })
      const v2 = runsOf('chain').filter(r => r.data.v === 2)
      // two chains would interleave: runs closer together than the interval
      for (let i = 1; i < v2.length; i++) expect(v2[i].start - v2[i - 1].end).toBeGreaterThanOrEqual(300)
      expect(runsOf('chain').filter(r => r.data.v === 1)).toHaveLength(1)
      expect(await SELECT.from('Target.Records')).toMatchObject([{ message: 'v1' }])
      const rows = await tasks()
      expect(rows).toHaveLength(1)
      expect(queueOf(rows[0])).toEqual({ task: 'chain', every: 300 })
    })
  })

  describe('dead letters', () => {
    let failing = true
    beforeAll(() => {
      srv.on('flaky', req => {
        runs.push({ event: 'flaky', start: Date.now(), attempt: req.queue.attempt })
        if (failing) throw new Error('upstream down')
      })
    })

    const deadLetter = () => waitFor(async () => {
      const row = await taskRow('flaky')
      return row?.dueAt === null && row.attempts === 2 && row
    }, { what: 'the occurrence to become a dead letter' })

    test('a failing occurrence is retried; a dead-lettered recurring task stays visible and reviving it resumes the schedule', async () => {
      failing = true
      await srv.schedule('flaky').every('200ms')
      const dead = await deadLetter()
      expect(dead.lastError).toContain('upstream down')
      expect(runsOf('flaky').map(r => r.attempt)).toEqual([1, 2])
      await sleep(3 * POLL)
      expect(runsOf('flaky')).toHaveLength(2)

      failing = false
      // what the dead-letter service's revive does
      await UPDATE(MESSAGES).set({ attempts: 0, dueAt: new Date().toISOString(), status: null, claimedBy: null, claimedAt: null }).where({ ID: dead.ID, dueAt: null })
      await waitFor(() => runsOf('flaky').length >= 4, { what: 'the schedule to resume' })
      const row = await taskRow('flaky')
      expect(row).toMatchObject({ ID: dead.ID, attempts: 0, lastError: null })
      expect(row.dueAt).not.toBeNull()
    })

    test('re-scheduling a dead-lettered task (as at the next boot) revives it', async () => {
      failing = true
      await srv.schedule('flaky').every('200ms')
      const dead = await deadLetter()
      failing = false
      await srv.schedule('flaky').every('200ms')
      await waitFor(() => runsOf('flaky').length >= 4, { what: 'the schedule to resume' })
      expect(await taskRow('flaky')).toMatchObject({ ID: dead.ID, attempts: 0, lastError: null })
    })
  })

  describe('long delays', () => {
    /** Statements that reach the database driver during `ms` of idle time. */
    async function statementsDuring(ms) {
      const statements = countStatements()
      try {
        await sleep(ms)
        return statements.count
      } finally {
        statements.stop()
      }
    }

    test('tasks due in 90 and 30 days cause no busy loop: the runner only polls while they are pending', async () => {
      await srv.schedule('far').after('90d')
      await srv.schedule('monthly').every('30d')
      await waitFor(() => runsOf('monthly').length === 1, { what: 'the first run of the 30-day task' })
      await cds.flush()
      const rows = await tasks()
      expect(rows.map(r => r.task)).toEqual(['far', 'monthly'])
      expect(millis(rows[0].dueAt)).toBeGreaterThan(Date.now() + 89 * DAY)
      expect(millis(rows[1].dueAt)).toBeGreaterThan(Date.now() + 29 * DAY)

      const window = 3000
      const count = await statementsDuring(window)
      // one poll per pollInterval: a claim, a look at the next due time, the reconciliation with its hold-back and
      // the reading of the database's clock, each a short transaction (on PostgreSQL about 25 statements at the
      // driver with BEGIN, session variables and COMMIT; 437 were counted in 3 s); a busy loop (CAP's setTimeout
      // overflow, W14) runs thousands of statements in this time
      const polls = window / POLL
      console.log(`statements at the driver during ${window} ms with tasks due in 30 and 90 days: ${count}`)
      expect(count).toBeGreaterThan(0)
      expect(count).toBeLessThanOrEqual(40 * (polls + 2))
      expect(runsOf('far')).toHaveLength(0)
      expect(runsOf('monthly')).toHaveLength(1)
    })
  })
})
