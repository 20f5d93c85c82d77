const { startApp } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES, messages, capRow } = require('../support/outbox')
const { monitor } = require('../support/monitor')
const cds = require('@sap/cds')

// An hour between polls: whatever runs during a test, runs because of a commit, a due time or a start.
startApp({ requires: { queue: { pollInterval: '1h', backoff: { base: 10, max: 50 } } } })

describe('processing', () => {
  let srv, queued
  const runs = []
  beforeAll(async () => {
    srv = await cds.connect.to('Target')
    queued = cds.queued(srv)
    srv.on('observe', req => {
      const { user, tenant, locale, id } = cds.context
      runs.push({
        tag: req.data.tag,
        user: user.id,
        privileged: user instanceof cds.User.Privileged || user.is?.('system-user') || false,
        tenant,
        locale,
        correlation: id,
        headers: req.headers,
        messageId: req.queue?.messageId,
        attempt: req.queue?.attempt
      })
    })
  })
  afterEach(async () => {
    await cds.flush()
    await DELETE.from(MESSAGES)
    runs.length = 0
  })
  const run = tag => runs.find(r => r.tag === tag)

  test('a message is dispatched right after the commit that enqueued it', async () => {
    await cds.tx(() => queued.emit('observe', { tag: 'now' }))
    await waitFor(() => run('now'), { what: 'dispatch' })
  })

  test('a row in the exact format of CAP\'s built-in queue is processed with its user, locale and headers', async () => {
    const row = capRow({
      event: 'observe', data: { tag: 'cap-row' }, user: 'carol',
      context: { id: 'corr-cap', locale: 'de' }, headers: { 'x-origin': 'cap' }
    })
    await INSERT.into(MESSAGES).entries(row)
    await cds.flush()
    expect(run('cap-row')).toMatchObject({
      user: 'carol', privileged: true, locale: 'de', correlation: 'corr-cap', headers: { 'x-origin': 'cap' }, messageId: row.ID
    })
    expect(await messages()).toHaveLength(0)
  })

  test('at startup the runner processes rows an earlier process left behind, with no new enqueue', async () => {
    cds.emit('shutdown') // stops the runner, as when the process ends
    await require('../../lib/plugin').eventQueues().runner.stop()
    const row = capRow({ event: 'observe', data: { tag: 'left-over' } })
    await INSERT.into(MESSAGES).entries(row)
    expect(run('left-over')).toBeUndefined()
    expect(await messages()).toMatchObject([{ status: null }])
    const swept = monitor().next('outcome', e => e.ID === row.ID)
    // what `cds serve` does in a new process: 'served', then 'listening' once every 'served' handler succeeded
    await cds.emit('served', cds.services)
    cds.emit('listening', { server: cds.app.server, url: cds.server.url })
    expect(await swept).toMatchObject({ kind: 'succeeded' })
    expect(run('left-over')).toBeTruthy()
  })

  test('the handler runs with the stored user as a privileged user, and the stored locale, correlation id and headers', async () => {
    const user = new cds.User({ id: 'alice', roles: ['admin'] })
    await cds.tx({ user, locale: 'fr', id: 'corr-7' }, () => queued.emit('observe', { tag: 'ctx' }, { 'x-custom': '1' }))
    const seen = await waitFor(() => run('ctx'))
    expect(seen).toMatchObject({ user: 'alice', privileged: true, locale: 'fr', correlation: 'corr-7', headers: { 'x-custom': '1' } })
  })

  test('req.on("succeeded") inside a queued handler fires after the message commits', async () => {
    const events = []
    srv.on('with-callback', req => {
      req.on('succeeded', () => events.push('succeeded'))
      req.on('done', () => events.push('done'))
      events.push('handled')
    })
    await cds.tx(() => queued.emit('with-callback', {}))
    await waitFor(() => events.includes('done'), { what: 'req.on(done)' })
    expect(events).toEqual(['handled', 'succeeded', 'done'])
  })

  test('a handler that writes and then fails leaves neither its write nor the deletion of its message', async () => {
    const ID = cds.utils.uuid()
    let attempts = 0
    srv.on('write-then-fail', async () => {
      attempts++
      await INSERT.into('test.Records').entries({ ID, kind: 'write-then-fail' })
      throw new Error('fails after writing')
    })
    await cds.tx(() => queued.emit('write-then-fail', {}))
    await waitFor(() => attempts >= 1)
    await cds.flush()
    expect(await SELECT.one.from('test.Records', ID)).toBeFalsy()
    const [row] = await messages()
    expect(row).toMatchObject({ attempts: expect.any(Number) })
    expect(row.attempts).toBeGreaterThanOrEqual(1)
    expect(row.lastError).toContain('fails after writing')
  })

  test('a handler that writes and succeeds leaves both its write and the deletion', async () => {
    const ID = cds.utils.uuid()
    srv.on('write', () => INSERT.into('test.Records').entries({ ID, kind: 'write' }))
    await cds.tx(() => queued.emit('write', {}))
    await waitFor(async () => (await SELECT.one.from('test.Records', ID)) && (await messages()).length === 0, { what: 'commit of write + delete' })
  })

  test('the message ID the handler reads is the row ID and the same on every retry', async () => {
    const seen = []
    srv.on('flaky', req => {
      seen.push({ id: req.queue.messageId, attempt: req.queue.attempt })
      if (seen.length < 3) throw new Error('not yet')
    })
    await cds.tx(async () => {
      await queued.emit('flaky', {})
      const [row] = await messages()
      seen.row = row.ID
    })
    await waitFor(async () => { await cds.flush(); return seen.length === 3 }, { what: 'three attempts' })
    expect(seen.map(s => s.id)).toEqual([seen.row, seen.row, seen.row])
    expect(seen.map(s => s.attempt)).toEqual([1, 2, 3])
  })
})
