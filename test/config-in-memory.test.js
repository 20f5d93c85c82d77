const { startApp } = require('./support/app')
const cds = require('@sap/cds')

startApp({ requires: { queue: false } })

describe('cds.requires.queue: false', () => {
  let srv, queued
  const runs = []
  beforeAll(async () => {
    srv = await cds.connect.to('Target')
    queued = cds.queued(srv)
    srv.on('note', req => void runs.push(req.data.n))
  })

  test('persists nothing: the queue table is not even part of the model', () => {
    expect(cds.model.definitions['cds.outbox.Messages']).toBeUndefined()
  })

  test('the health check is UP with no checks: nothing is stored, nothing runs in the background', async () => {
    expect(await cds.queued.health({ maxLag: '1m' })).toEqual({ status: 'UP', checks: {} })
  })

  // CAP awaits a transaction's 'succeeded' listeners before cds.tx() resolves, so the in-memory dispatch is over then.
  test('a queued call runs once, after commit, not during the transaction', async () => {
    await cds.tx(async () => {
      await queued.emit('note', { n: 1 })
      expect(runs).toEqual([])
    })
    expect(runs).toEqual([1])
  })

  test('a rolled-back transaction runs nothing', async () => {
    await expect(cds.tx(async () => {
      await queued.emit('note', { n: 2 })
      throw new Error('rollback')
    })).rejects.toThrow('rollback')
    expect(runs).not.toContain(2)
  })

  test('a failing call is logged and not retried; the next one still runs', async () => {
    let failures = 0
    srv.on('fragile', () => { failures++; throw new Error('in-memory failure') })
    await cds.tx(async () => {
      await queued.emit('fragile', {})
      await queued.emit('note', { n: 3 })
    })
    expect(runs).toContain(3)
    expect(failures).toBe(1)
  })
})
