const { startApp } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES, messages } = require('../support/outbox')
const cds = require('@sap/cds')

const { POST } = startApp()

describe('queueing', () => {
  let srv, queued
  const seen = []
  beforeAll(async () => {
    srv = await cds.connect.to('Target')
    srv.on('greet', req => void seen.push(req.data.id))
    srv.on('ask', req => void seen.push(req.data.id))
    srv.before('CREATE', 'Records', req => void seen.push(req.data.ID))
    srv.on('act', req => {
      seen.push(`act:${req.data.value}`)
      return cds.queued(srv).emit('greet', { id: `from-http:${req.data.value}` })
    })
    queued = cds.queued(srv)
  })
  afterEach(async () => {
    await cds.flush()
    await DELETE.from(MESSAGES)
  })

  test('emit, send and run write a row in the caller transaction, visible there before commit, and resolve to undefined', async () => {
    let results, inside
    await cds.tx(async () => {
      results = [
        await queued.emit('greet', { id: 'e1' }),
        await queued.send('ask', { id: 's1' }),
        await queued.run(INSERT.into('Target.Records').entries({ ID: cds.utils.uuid(), kind: 'run' }))
      ]
      inside = await messages()
    })
    expect(results).toEqual([undefined, undefined, undefined])
    expect(inside).toHaveLength(3)
    expect(inside.map(r => JSON.parse(r.msg).event)).toEqual(['greet', 'ask', 'CREATE'])
    expect(seen).not.toContain('e1')
  })

  test('handlers of the target do not run at enqueue time, and run after commit', async () => {
    await cds.tx(async () => {
      await queued.emit('greet', { id: 'after-commit' })
      expect(seen).not.toContain('after-commit')
      // a round trip to the database within the transaction: still nothing dispatched
      await SELECT.from(MESSAGES)
      expect(seen).not.toContain('after-commit')
    })
    await waitFor(() => seen.includes('after-commit'), { what: 'dispatch after commit' })
    await waitFor(async () => (await messages()).length === 0, { what: 'the row deleted with the handler\'s commit' })
  })

  test('a rolled-back transaction leaves no row and dispatches nothing', async () => {
    await expect(
      cds.tx(async () => {
        await queued.emit('greet', { id: 'rolled-back' })
        await queued.send('ask', { id: 'rolled-back-too' })
        throw new Error('business failure')
      })
    ).rejects.toThrow('business failure')
    await cds.flush()
    expect(await messages()).toHaveLength(0)
    expect(seen).not.toContain('rolled-back')
    expect(seen).not.toContain('rolled-back-too')
  })

  test('a queued run() replays the query against the service after commit', async () => {
    const ID = cds.utils.uuid()
    await cds.tx(() => queued.run(INSERT.into('Target.Records').entries({ ID, kind: 'queued-insert' })))
    const record = await waitFor(() => SELECT.one.from('test.Records', ID), { what: 'queued INSERT' })
    expect(record).toMatchObject({ kind: 'queued-insert' })
    expect(seen).toContain(ID) // it went through the service's handlers
  })

  test('cds.queued returns the same proxy every time, and cds.unqueued the original service', () => {
    expect(cds.queued(srv)).toBe(queued)
    expect(cds.queued(queued)).toBe(queued)
    expect(cds.outboxed(srv)).toBe(queued)
    expect(cds.unqueued(queued)).toBe(srv)
    expect(cds.unboxed(queued)).toBe(srv)
    expect(cds.unqueued(srv)).toBe(srv)
  })

  test('a queued call inside an HTTP request stores neither its Authorization nor its Cookie header', async () => {
    const secret = 'Basic ' + Buffer.from('alice:topsecret-password').toString('base64')
    let stored
    srv.before('greet', async req => {
      if (req.data.id === 'from-http:x') stored = await SELECT.from(MESSAGES)
    })
    srv.prepend(() => srv.on('act', async (req, next) => {
      const result = await next()
      stored = await SELECT.from(MESSAGES)
      return result
    }))
    await POST('/odata/v4/target/act', { value: 'x' }, {
      headers: { Authorization: secret, Cookie: 'session=cookie-secret-value', 'x-correlation-id': 'corr-42' }
    })
    await waitFor(() => seen.includes('from-http:x'), { what: 'queued call from HTTP' })
    expect(stored).toHaveLength(1)
    const row = JSON.stringify(stored[0])
    expect(row).toContain('corr-42')
    for (const leak of ['topsecret', secret.slice(6), 'cookie-secret-value', 'alice:']) expect(row).not.toContain(leak)
  })
})
