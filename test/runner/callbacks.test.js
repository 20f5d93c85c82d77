const { startApp } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES, messages } = require('../support/outbox')
const cds = require('@sap/cds')

startApp({ requires: { queue: { maxAttempts: 2, backoff: { base: 10, max: 20 } } } })

describe('callbacks', () => {
  let srv, queued
  const calls = []
  beforeAll(async () => {
    srv = await cds.connect.to('Target')
    queued = cds.queued(srv)
    srv.before('*', req => void calls.push({ star: req.event }))
    srv.on('compute', req => req.data.a + req.data.b)
    srv.on('breaks', () => { throw Object.assign(new Error('upstream refused'), { code: 'E_UPSTREAM', detail: 'quota' }) })
    srv.after('compute/#succeeded', (data, req) => void calls.push({ ok: data, data: req.data, headers: req.headers }))
    srv.after('breaks/#failed', (data, req) => void calls.push({ failed: data, data: req.data, headers: req.headers }))
    srv.on('compute/#succeeded/#succeeded', () => void calls.push({ nested: true }))
  })
  afterEach(async () => {
    await cds.flush()
    await DELETE.from(MESSAGES)
    calls.length = 0
  })

  test('<event>/#succeeded is emitted with the handler result, the original data and headers', async () => {
    await cds.tx(() => queued.send('compute', { a: 2, b: 3 }, { 'x-trace': 't1' }))
    const call = await waitFor(() => calls.find(c => 'ok' in c), { what: '#succeeded' })
    expect(call).toEqual({ ok: 5, data: { a: 2, b: 3 }, headers: { 'x-trace': 't1' } })
  })

  test('<event>/#failed is emitted once, when the message becomes a dead letter, with the error', async () => {
    await cds.tx(() => queued.emit('breaks', { n: 1 }, { 'x-trace': 't2' }))
    await waitFor(async () => { await cds.flush(); return calls.some(c => 'failed' in c) }, { what: '#failed' })
    await cds.flush()
    const failed = calls.filter(c => 'failed' in c)
    expect(failed).toHaveLength(1)
    expect(failed[0].failed).toMatchObject({ name: 'Error', message: 'upstream refused', code: 'E_UPSTREAM', detail: 'quota' })
    expect(failed[0]).toMatchObject({ data: { n: 1 }, headers: { 'x-trace': 't2' } })
  })

  test('* handlers are not called for callbacks, and callbacks of callbacks are not emitted', async () => {
    await cds.tx(() => queued.send('compute', { a: 1, b: 1 }))
    await waitFor(() => calls.some(c => 'ok' in c))
    // flush() returns once nothing is processable: a callback of the callback would have run by now
    await cds.flush()
    expect(await SELECT.from('cds.outbox.Messages')).toEqual([])
    expect(calls.filter(c => c.star)).toEqual([{ star: 'compute' }])
    expect(calls.some(c => c.nested)).toBe(false)
  })

  test('no callback row is written when nobody listens for it', async () => {
    srv.on('quiet', () => 'result')
    await cds.tx(() => queued.send('quiet', {}))
    await cds.flush()
    expect(await messages()).toHaveLength(0)
  })
})
