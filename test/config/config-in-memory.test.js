const { startApp } = require('../support/app')
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

describe('cds.requires.queue: false, on a database a persistent queue used before', () => {
  // The app ran with the persistent queue, then switched it off: its table (the plugin's columns) and a dead letter
  // of a queue with maxAttempts 3 (3 attempts) are still in the database. Nothing is persisted now, so nothing of the table may run.
  beforeAll(async () => {
    await cds.run(`CREATE TABLE cds_outbox_Messages (ID VARCHAR(36) PRIMARY KEY, timestamp TIMESTAMP, target VARCHAR(255),
      msg TEXT, attempts INTEGER DEFAULT 0, partition INTEGER DEFAULT 0, lastError TEXT, lastAttemptTimestamp TIMESTAMP,
      status VARCHAR(23), task VARCHAR(255), appid VARCHAR(255), dueAt TIMESTAMP, claimedBy VARCHAR(255), claimedAt TIMESTAMP,
      interrupted INTEGER DEFAULT 0, orderingKey VARCHAR(255), service VARCHAR(255), event VARCHAR(255))`)
    const msg = JSON.stringify({ event: 'note', data: { n: 'stored' }, inbound: false })
    const past = new Date(Date.now() - 60_000).toISOString()
    // literal values: plain SQL's parameter markers differ between the databases
    await cds.run(`INSERT INTO cds_outbox_Messages (ID, timestamp, target, msg, attempts, dueAt)
      VALUES ('5d9c0c7e-0000-4000-8000-000000000001', '${past}', 'Target', '${msg}', 3, '${past}')`)
  })

  test("cds.flush() and the runner leave the table's rows alone: a dead letter does not run again", async () => {
    const srv = await cds.connect.to('Target')
    const stored = []
    srv.on('note', req => void stored.push(req.data.n))
    await cds.flush()
    const rows = await cds.run('SELECT attempts FROM cds_outbox_Messages')
    expect(stored).toEqual([])
    expect(rows.map(r => Number(r.attempts))).toEqual([3])
  })
})
