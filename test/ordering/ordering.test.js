const { startApp } = require('../support/app')
const { waitFor, sleep } = require('../support/wait')
const { MESSAGES, messages } = require('../support/outbox')
const cds = require('@sap/cds')

const fast = { backoff: { base: 10, max: 50 } }
startApp({
  requires: {
    // Six slots: on the portable store every handler transaction holds one of PostgreSQL's ten pooled connections,
    // and with ten slots busy the runner's own statements waited past CAP's 1 s acquire timeout on a loaded machine
    // (outcomes not recorded, messages run again: at least once, but not what this suite measures).
    queue: { pollInterval: '300ms', concurrency: 6, ...fast },
    // Keyed by the `key` in the event's data; a dead head leaves its key (the default).
    Ordered: { impl: 'srv/plain-service.js', outboxed: { orderingKey: 'key', maxAttempts: 3, ...fast } },
    // The same, but a dead head keeps its key blocked; keyed by a nested path.
    Strict: { impl: 'srv/plain-service.js', outboxed: { orderingKey: 'order.ID', orderingOnDeadLetter: 'block', maxAttempts: 2, ...fast } },
    // Long backoff: its failing head stays in retry for the whole test.
    Patient: { impl: 'srv/plain-service.js', outboxed: { orderingKey: 'key', backoff: { base: 60000 } } },
    Limited: { impl: 'srv/plain-service.js', outboxed: { concurrency: 2 } }
  }
})

/** A gate handlers wait at until the test opens it: no timing assumptions. */
function gate() {
  let open
  const opened = new Promise(resolve => (open = resolve))
  return { opened, open }
}

describe('ordering and concurrency', () => {
  let ordered, strict, patient, limited, target
  beforeAll(async () => {
    ordered = await cds.connect.to('Ordered')
    strict = await cds.connect.to('Strict')
    patient = await cds.connect.to('Patient')
    limited = await cds.connect.to('Limited')
    target = cds.queued(await cds.connect.to('Target'))
  })
  afterEach(async () => {
    await cds.flush()
    await DELETE.from(MESSAGES)
  })

  /** Runs per key, and a check that no two runs of one key overlap. */
  function keyedRecorder() {
    const seen = {}
    const active = {}
    let overlaps = 0
    let concurrent = 0
    let maxConcurrent = 0
    return {
      seen,
      get overlaps() { return overlaps },
      get maxConcurrent() { return maxConcurrent },
      async run(key, seq, delay = 0) {
        if (active[key]) overlaps++
        active[key] = true
        maxConcurrent = Math.max(maxConcurrent, ++concurrent)
        if (delay) await sleep(delay)
        ;(seen[key] ??= []).push(seq)
        concurrent--
        active[key] = false
      }
    }
  }

  test('20 keys × 50 messages with random handler delays: each key runs one at a time, in enqueue order, without gaps', async () => {
    const runs = keyedRecorder()
    cds.unqueued(ordered).on('step', req => runs.run(req.data.key, req.data.seq, Math.random() * 5))
    const KEYS = 20, PER_KEY = 50
    // Several transactions, keys interleaved in each, as concurrent requests would write them.
    for (let from = 0; from < PER_KEY; from += 10) {
      await cds.tx(async () => {
        for (let seq = from; seq < from + 10; seq++) {
          for (let k = 0; k < KEYS; k++) await ordered.emit('step', { key: `k${k}`, seq })
        }
      })
    }
    // The portable store checks each candidate's key in its claim: this backlog took 55 s there on the loaded 2-core
    // machine (20 s on the native store), so the bound only guards against a hang.
    await waitFor(() => Object.values(runs.seen).flat().length === KEYS * PER_KEY, { timeout: 240000, what: 'all messages' })
    const expected = Array.from({ length: PER_KEY }, (_, i) => i)
    expect(Object.keys(runs.seen)).toHaveLength(KEYS)
    for (const seqs of Object.values(runs.seen)) expect(seqs).toEqual(expected)
    expect(runs.overlaps).toBe(0)
    expect(runs.maxConcurrent).toBeGreaterThan(1) // different keys did run side by side
    // the last handlers' transactions (with the deletion of their rows) commit just after they ran
    await waitFor(async () => (await messages()).length === 0, { what: 'an empty queue' })
  }, 300000)

  test('a failing message holds back the later messages of its key until it succeeds', async () => {
    const seen = []
    let failures = 0
    cds.unqueued(ordered).on('flaky', req => {
      if (req.data.seq === 0 && failures < 2) {
        failures++
        throw new Error('not yet')
      }
      seen.push(req.data.seq)
    })
    await cds.tx(async () => {
      for (let seq = 0; seq < 5; seq++) await ordered.emit('flaky', { key: 'flaky', seq })
    })
    await waitFor(async () => { await cds.flush(); return seen.length === 5 }, { what: 'the key to drain' })
    expect(failures).toBe(2)
    expect(seen).toEqual([0, 1, 2, 3, 4])
  })

  test('a message numbered by a claim that handed it back keeps its place: one of its key stamped earlier runs after it, with the next number', async () => {
    // Chaos seed 119: after a PostgreSQL restart, key o2's number 2 ran before its number 1. Process B's message
    // (stamped later) was claimed and numbered 1, then handed back unstarted; process A's, stamped 250 ms earlier by
    // a clock estimate behind, committed after that claim. Here the two rows are put in that state: the numbered one
    // due again and unclaimed, the earlier-stamped one unnumbered and due, the key's counter at 1.
    const seen = []
    cds.unqueued(ordered).on('numbered', req => void seen.push([req.data.seq, req.queue.sequence]))
    const later = { queue: { after: 3_600_000 } }
    await cds.tx(() => ordered.send({ event: 'numbered', data: { key: 'handedBack', seq: 'stamped earlier' }, ...later }))
    await cds.tx(() => ordered.send({ event: 'numbered', data: { key: 'handedBack', seq: 'numbered first' }, ...later }))
    const rows = (await messages()).sort((x, y) => (x.timestamp < y.timestamp ? -1 : 1))
    expect(rows.map(r => JSON.parse(r.msg).data.seq)).toEqual(['stamped earlier', 'numbered first'])
    // Due now, stamped 250 ms apart, and without the delay they were written with (which keeps them off the claims).
    const { settings } = require('../../lib/plugin').eventQueues()
    const now = Date.now() - 1000
    const undelayed = row => { const { queue: _q, ...msg } = JSON.parse(row.msg); return JSON.stringify(msg) }
    const stamped = (row, at, more) => UPDATE(MESSAGES).set({ timestamp: at, dueAt: at, msg: undelayed(row), ...more }).where({ ID: row.ID })
    await cds.tx(async () => {
      await UPSERT.into('cds.outbox.KeySequences').entries({ appid: settings.appid ?? '', orderingKey: 'handedBack', issued: 1 })
      await stamped(rows[1], new Date(now).toISOString(), { sequence: 1 })
      await stamped(rows[0], new Date(now - 250).toISOString())
    })
    await waitFor(async () => { await cds.flush(); return seen.length === 2 }, { what: 'both messages of the key' })
    expect(seen).toEqual([['numbered first', 1], ['stamped earlier', 2]])
  })

  test('a delayed message takes its place at its due time: a later message of its key that is due now runs at once', async () => {
    const seen = []
    cds.unqueued(ordered).on('placed', req => void seen.push(req.data.seq))
    await cds.tx(async () => {
      await ordered.send({ event: 'placed', data: { key: 'delayed', seq: 0 }, queue: { after: 3_600_000 } })
      await ordered.emit('placed', { key: 'delayed', seq: 1 })
    })
    await waitFor(() => seen.length === 1, { what: 'the message due now' })
    expect(seen).toEqual([1])
    // its row goes when its handler's transaction commits, just after the handler ran
    const [waiting] = await waitFor(async () => { const rows = await messages(); return rows.length === 1 && rows }, { what: 'its row deleted' })
    expect(JSON.parse(waiting.msg).data).toEqual({ key: 'delayed', seq: 0 })
  })

  test('a key whose first message keeps failing does not delay other keys', async () => {
    const seen = { poisoned: [], a: [], b: [] }
    cds.unqueued(patient).on('work', req => {
      if (req.data.key === 'poisoned' && req.data.seq === 0) throw new Error('poison')
      seen[req.data.key].push(req.data.seq)
    })
    await cds.tx(async () => {
      for (let seq = 0; seq < 10; seq++) {
        for (const key of ['poisoned', 'a', 'b']) await patient.emit('work', { key, seq })
      }
    })
    // 20 messages in key order; on the loaded machine the portable store took more than 10 s for them
    await waitFor(() => seen.a.length === 10 && seen.b.length === 10, { timeout: 60000, what: 'keys a and b' })
    await cds.flush()
    expect(seen.a).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    expect(seen.b).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    expect(seen.poisoned).toEqual([])
    const left = await SELECT.from(MESSAGES).columns('orderingKey', 'attempts').orderBy('timestamp')
    expect(left).toHaveLength(10)
    expect(left.every(r => r.orderingKey === 'poisoned')).toBe(true)
    // the head, waiting for its retry (on a loaded machine it may have had more than one by now); its followers never ran
    expect(left[0].attempts).toBeGreaterThanOrEqual(1)
    expect(left.slice(1).every(r => r.attempts === 0)).toBe(true)
  })

  test('by default a head that becomes a dead letter leaves its key: the later messages run, in order', async () => {
    const seen = []
    cds.unqueued(ordered).on('doomed', req => {
      if (req.data.seq === 0) throw new Error('never works')
      seen.push(req.data.seq)
    })
    await cds.tx(async () => {
      for (let seq = 0; seq < 4; seq++) await ordered.emit('doomed', { key: 'doomed', seq })
    })
    await waitFor(async () => { await cds.flush(); return seen.length === 3 }, { what: 'the followers' })
    expect(seen).toEqual([1, 2, 3])
    const [dead] = await messages()
    expect(dead).toMatchObject({ attempts: 3, dueAt: null, orderingKey: null })
  })

  test("with orderingOnDeadLetter 'block' the key waits for its dead letter: revived, it runs first; deleted, the rest follow", async () => {
    const seen = []
    let healthy = false
    cds.unqueued(strict).on('ship', req => {
      if (req.data.seq === 0 && !healthy) throw new Error('carrier down')
      seen.push(`${req.data.order.ID}:${req.data.seq}`)
    })
    await cds.tx(async () => {
      for (let seq = 0; seq < 3; seq++) await strict.emit('ship', { order: { ID: 'o1' }, seq })
      for (let seq = 0; seq < 3; seq++) await strict.emit('ship', { order: { ID: 'o2' }, seq })
    })
    const deadLetters = async () => (await messages()).filter(r => r.dueAt === null)
    await waitFor(async () => { await cds.flush(); return (await deadLetters()).length === 2 }, { what: 'two dead heads' })
    await cds.flush()
    expect(seen).toEqual([]) // both keys are blocked behind their dead letters
    expect(await messages()).toHaveLength(6)

    // Revived (as the dead-letter service does), the head of o1 runs first, then its followers.
    healthy = true
    const [o1, o2] = (await deadLetters()).sort((x, y) => (x.orderingKey < y.orderingKey ? -1 : 1))
    const { OperatorQueries } = require('../../lib/ops/queries')
    const { settings } = require('../../lib/plugin').eventQueues()
    await cds.tx(() => new OperatorQueries(settings.queues, settings.appid).revive([o1.ID]))
    await waitFor(async () => { await cds.flush(); return seen.length === 3 }, { what: 'key o1' })
    expect(seen).toEqual(['o1:0', 'o1:1', 'o1:2'])

    // Deleted, the dead head of o2 no longer holds its key.
    await DELETE.from(MESSAGES).where({ ID: o2.ID })
    await waitFor(async () => { await cds.flush(); return seen.length === 5 }, { what: 'key o2' })
    expect(seen.slice(3)).toEqual(['o2:1', 'o2:2'])
  })

  test('unordered messages, unkeyed messages of an ordered queue and scheduled tasks run while a key is blocked', async () => {
    const seen = []
    cds.unqueued(strict).on('stuck', req => {
      if (req.data.order?.ID) throw new Error('blocked for good')
      seen.push('unkeyed on the same queue')
    })
    await cds.tx(async () => {
      for (let seq = 0; seq < 3; seq++) await strict.emit('stuck', { order: { ID: 'blocked' }, seq })
    })
    await waitFor(async () => { await cds.flush(); return (await messages()).some(r => r.dueAt === null) }, { what: 'dead head' })

    const plain = cds.unqueued(target)
    plain.on('unordered', () => seen.push('unordered'))
    plain.on('tick', () => seen.push('task'))
    await cds.tx(async () => {
      await target.emit('unordered', {})
      await strict.emit('stuck', {})
      await plain.schedule('tick')
    })
    await waitFor(async () => { await cds.flush(); return seen.length === 3 }, { what: 'the unaffected messages' })
    expect(seen.sort()).toEqual(['task', 'unkeyed on the same queue', 'unordered'])
    expect(await messages()).toHaveLength(3) // the blocked key: its dead head and two followers
  })

  test('the x-ordering-key header sets the key per call and wins over the configured key; numbers become strings', async () => {
    const keys = await cds.tx(async () => {
      await target.emit('keyed', { n: 1 }, { 'x-ordering-key': 'customer-7' })
      await target.emit('keyed', { n: 2 })
      await ordered.emit('keyed', { key: 'from-data' }, { 'X-Ordering-Key': 'from-header' })
      await ordered.emit('keyed', { key: 4711 })
      const rows = await SELECT.from(MESSAGES).columns('orderingKey').orderBy('timestamp')
      return rows.map(r => r.orderingKey)
    })
    expect(keys).toEqual(['customer-7', null, 'from-header', '4711'])
  })

  test('a function given to cds.queued derives the key from the request', async () => {
    const queued = cds.queued(await cds.connect.to('Plain'), { orderingKey: req => req.data.order.ID })
    const keys = await cds.tx(async () => {
      await queued.emit('placed', { order: { ID: 'o-17' } })
      return (await SELECT.from(MESSAGES).columns('orderingKey')).map(r => r.orderingKey)
    })
    expect(keys).toEqual(['o-17'])
  })

  test('an ordering key that is not a short string or a number fails the call, naming header and event', async () => {
    await expect(cds.tx(() => target.emit('bad', {}, { 'x-ordering-key': { id: 1 } }))).rejects.toThrow(
      'Invalid header x-ordering-key of event "bad": {"id":1}. Expected a non-empty string of at most 255 characters without NUL characters, or a number.'
    )
    await expect(cds.tx(() => ordered.emit('bad', { key: 'x'.repeat(256) }))).rejects.toThrow(
      /^Invalid ordering key \(option orderingKey\) of event "bad": "x+"\. Expected a non-empty string/
    )
    expect(await messages()).toHaveLength(0)
  })

  test('a key is measured in characters, not UTF-16 units: 255 emoji are a key, 256 are refused', async () => {
    const keys = await cds.tx(async () => {
      await target.emit('keyed', {}, { 'x-ordering-key': '🚀'.repeat(255) })
      return (await SELECT.from(MESSAGES).columns('orderingKey')).map(r => r.orderingKey)
    })
    expect(keys).toEqual(['🚀'.repeat(255)])
    await expect(cds.tx(() => target.emit('long', {}, { 'x-ordering-key': '🚀'.repeat(256) }))).rejects.toThrow(
      /^Invalid header x-ordering-key of event "long": "(?:🚀)+"\. Expected a non-empty string of at most 255 characters/
    )
  })

  test('a key with a NUL character fails the call with the same clear error on every database', async () => {
    await expect(cds.tx(() => target.emit('nul', {}, { 'x-ordering-key': 'order\u00004711' }))).rejects.toThrow(
      'Invalid header x-ordering-key of event "nul": "order\\u00004711". Expected a non-empty string of at most 255 characters without NUL characters, or a number.'
    )
    await expect(cds.tx(() => ordered.emit('nul', { key: '\u0000' }))).rejects.toThrow(/^Invalid ordering key \(option orderingKey\) of event "nul"/)
    expect(await messages()).toHaveLength(0)
  })

  test('invalid ordering and concurrency options are refused with the option, the value and what is allowed', () => {
    const { compileQueue } = require('../../lib/config/queue')
    expect(() => compileQueue('q', { orderingKey: 'order ID' }, 'cds.requires.Orders.outboxed')).toThrow(
      'Invalid cds.requires.Orders.outboxed.orderingKey: "order ID". Expected a path into the event\'s data like \'ID\' or \'order.ID\', or a function req => key.'
    )
    expect(() => compileQueue('q', { orderingOnDeadLetter: 'skip' }, 'cds.requires.queue')).toThrow(
      "Invalid cds.requires.queue.orderingOnDeadLetter: \"skip\". Expected 'continue' or 'block'."
    )
    expect(() => compileQueue('q', { concurrency: 0 }, 'cds.requires.slowQueue')).toThrow(
      'Invalid cds.requires.slowQueue.concurrency: 0. Expected an integer from 1 to 1000.'
    )
  })

  test('a queue never runs more messages at once than its concurrency', async () => {
    let running = 0, most = 0, done = 0
    cds.unqueued(limited).on('slow', async () => {
      most = Math.max(most, ++running)
      await sleep(20)
      running--
      done++
    })
    await cds.tx(async () => {
      for (let n = 0; n < 12; n++) await limited.emit('slow', { n })
    })
    await waitFor(async () => { await cds.flush(); return done === 12 }, { what: 'all slow messages' })
    expect(most).toBe(2)
  })

  test('a queue held at its limit by slow handlers does not hold up the messages of another queue', async () => {
    const slow = gate()
    let started = 0, finished = 0, others = 0
    cds.unqueued(limited).on('blocking', async () => {
      started++
      await slow.opened
      finished++
    })
    cds.unqueued(target).on('quick', () => others++)
    await cds.tx(async () => {
      for (let n = 0; n < 6; n++) await limited.emit('blocking', { n })
    })
    await waitFor(() => started === 2, { what: 'the slow queue to fill its slots' })
    await cds.tx(async () => {
      for (let n = 0; n < 5; n++) await target.emit('quick', { n })
    })
    await waitFor(() => others === 5, { what: 'the other queue' })
    expect(started).toBe(2) // the slow queue is still at its limit, its other messages wait
    expect(finished).toBe(0)
    slow.open()
    await waitFor(async () => { await cds.flush(); return finished === 6 }, { what: 'the slow queue to drain' })
  })
})
