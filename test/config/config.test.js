const { startApp } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES, messages } = require('../support/outbox')
const cds = require('@sap/cds')

startApp({ requires: { queue: { backoff: { base: 5, max: 20 } }, CustomMessaging: { impl: 'srv/custom-messaging.js' } } })

/** Emits `event` on the service as a consumer would (cds.connect.to applies the configuration). */
async function emitOn(name, event, data = {}) {
  const srv = await cds.connect.to(name)
  await cds.tx(() => srv.emit(event, data))
  return srv
}

/** Whether a call on the service was stored as a row (queued) or handled synchronously. */
async function isQueued(name) {
  const original = cds.unqueued(await cds.connect.to(name))
  let ran = false
  original.on('probe', () => { ran = true })
  let rows, synchronously
  await cds.tx(async () => {
    await (await cds.connect.to(name)).emit('probe', {})
    synchronously = ran // read before commit: after it, the runner dispatches a queued call at once
    rows = await SELECT.from(MESSAGES).where({ msg: { like: `%"service":"${name}"%` } })
  })
  await cds.flush()
  return { queued: rows.length === 1 && !synchronously, target: rows[0]?.target }
}

describe('configuration', () => {
  afterEach(() => DELETE.from(MESSAGES))

  test('outboxed: true queues the service on the default queue', async () => {
    expect(await isQueued('Outboxed')).toEqual({ queued: true, target: 'queue' })
  })

  test("outboxed: 'queueName' puts the service on that named queue", async () => {
    expect(await isQueued('NamedQueue')).toEqual({ queued: true, target: 'slowQueue' })
  })

  test('outboxed: { options } gives the service a queue of its own', async () => {
    expect(await isQueued('OwnQueue')).toEqual({ queued: true, target: 'OwnQueue' })
  })

  test('the legacy keys outbox and queued queue the service too', async () => {
    expect(await isQueued('LegacyOutbox')).toEqual({ queued: true, target: 'queue' })
    expect(await isQueued('LegacyQueued')).toEqual({ queued: true, target: 'queue' })
  })

  test('outboxed: false and services without the setting run synchronously', async () => {
    expect((await isQueued('NotQueued')).queued).toBe(false)
    expect((await isQueued('Plain')).queued).toBe(false)
  })

  test('messaging services are queued by default, local-messaging and file-based-messaging included', async () => {
    expect(await isQueued('messaging')).toEqual({ queued: true, target: 'queue' })
    expect(await isQueued('fileMessaging')).toEqual({ queued: true, target: 'queue' })
  })

  test('a messaging service of the app configured only with impl (a cds.MessagingService subclass) is queued by default', async () => {
    expect(await isQueued('CustomMessaging')).toEqual({ queued: true, target: 'queue' })
  })

  test('outboxed: false opts a messaging service out', async () => {
    expect((await isQueued('syncMessaging')).queued).toBe(false)
  })

  test('the effective options of a queue are visible on the proxy, as in CAP', async () => {
    const own = await cds.connect.to('OwnQueue')
    expect(own.queued).toMatchObject({ maxAttempts: 3 })
    expect((await cds.connect.to('Outboxed')).queued).toMatchObject({ maxAttempts: 10 })
  })

  test('options passed to cds.queued(srv, options) give that service a queue of its own, never the shared one', async () => {
    const plain = cds.queued(await cds.connect.to('Plain'), { maxAttempts: 4 })
    expect(plain.queued).toMatchObject({ maxAttempts: 4 })
    // Read before commit: after it, this process may already have run the message and deleted its row.
    const row = await cds.tx(async () => {
      await plain.emit('probe', {})
      return SELECT.one.from(MESSAGES).where({ msg: { like: '%"service":"Plain"%' } })
    })
    expect(row.target).toBe('Plain')
    expect((await cds.connect.to('Outboxed')).queued).toMatchObject({ maxAttempts: 10 })
    await cds.flush()
  })

  test('options for a service queued already are validated like those that define a queue', async () => {
    const outboxed = await cds.connect.to('Outboxed')
    expect(() => cds.queued(outboxed, { maxAttempts: 0 })).toThrow('Invalid cds.queued(Outboxed, options).maxAttempts: 0. Expected an integer >= 1.')
    const plain = cds.queued(await cds.connect.to('Plain'), { maxAttempts: 4 })
    expect(() => cds.queued(plain, { backoff: { jitter: 2 } })).toThrow('Invalid cds.queued(Plain, options).backoff.jitter: 2. Expected a number from 0 to 1.')
  })

  test('other options for a service queued already keep its queue and log which ones are ignored; the same options log nothing', async () => {
    const LOG = cds.log('queue')
    cds.log('queue', 'warn')
    const warn = jest.spyOn(LOG, 'warn')
    try {
      const outboxed = await cds.connect.to('Outboxed')
      expect(cds.queued(outboxed, { maxAttempts: 1, timeout: '1h' })).toBe(outboxed)
      expect(outboxed.queued).toMatchObject({ name: 'queue', maxAttempts: 10 })
      expect(warn.mock.calls.map(args => args.join(' '))).toEqual([
        "cds.queued(Outboxed, options): the service is queued already, on queue 'queue' (options from cds.requires.queue), " +
          'and keeps it: ignored maxAttempts 1 (in effect: 10). Give queue options where the service is configured ' +
          '(cds.requires.Outboxed.outboxed) or to its first cds.queued call.'
      ])

      warn.mockClear()
      // a service of its own, queued by this test only; a handler calling cds.queued each time passes a new function
      const fresh = await cds.connect.to('Fresh', { impl: 'srv/plain-service.js' })
      const queued = cds.queued(fresh, { maxAttempts: 4, orderingKey: req => req.data.ID })
      expect(cds.queued(fresh, { maxAttempts: 4, orderingKey: req => req.data.ID })).toBe(queued)
      expect(cds.queued(queued)).toBe(queued)
      expect(warn).not.toHaveBeenCalled()
    } finally {
      warn.mockRestore()
      cds.log('queue', 'silent')
    }
  })

  test.each([
    ['NamedQueue', 2], // cds.requires.slowQueue.maxAttempts
    ['OwnQueue', 3], // cds.requires.OwnQueue.outboxed.maxAttempts
    ['Outboxed', 10] // the default
  ])('per-queue maxAttempts is honoured when %s messages are processed: dead after %i attempts', async (name, max) => {
    const original = cds.unqueued(await cds.connect.to(name))
    let runs = 0
    original.on('always-fails', () => { runs++; throw new Error('remote down') })
    await emitOn(name, 'always-fails')
    const dead = await waitFor(async () => {
      await cds.flush()
      const [row] = await messages()
      return row && row.attempts >= max && row
    }, { timeout: 20000, what: `${name} to become a dead letter` })
    expect(dead.attempts).toBe(max)
    expect(runs).toBe(max)
  })
})
