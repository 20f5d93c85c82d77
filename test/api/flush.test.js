const { execFile } = require('child_process')
const { promisify } = require('util')
const path = require('path')
const { startApp, APP } = require('../support/app')
const { MESSAGES, capRow } = require('../support/outbox')
const cds = require('@sap/cds')

// A poll interval of an hour: only cds.flush() processes what the test inserts.
startApp({ requires: { queue: { pollInterval: '1h', backoff: { base: 60000 } } } })

describe('cds.flush()', () => {
  let srv
  const handled = []
  beforeAll(async () => {
    srv = await cds.connect.to('Target')
    srv.on('item', req => {
      if (req.data.n % 10 === 0) throw new Error(`item ${req.data.n} fails`)
      handled.push(req.data.n)
    })
  })

  test('processes all 250 pending messages, leaves nothing processable behind, and does not reject when handlers fail', async () => {
    const rows = Array.from({ length: 250 }, (_, n) => capRow({ event: 'item', data: { n } }))
    await INSERT.into(MESSAGES).entries(rows)
    await expect(cds.flush()).resolves.toBeUndefined()
    expect(handled).toHaveLength(225)
    expect(new Set(handled).size).toBe(225)
    const left = await SELECT.from(MESSAGES)
    expect(left).toHaveLength(25)
    // the failed ones wait for their backoff: none is due now
    const due = left.filter(r => r.dueAt !== null && Date.parse(String(r.dueAt).replace(' ', 'T')) <= Date.now())
    expect(due).toHaveLength(0)
    expect(left.every(r => r.attempts === 1)).toBe(true)
  })

  test('right after a commit, it waits for the messages this process claimed at enqueue and runs after commit', async () => {
    const done = []
    srv.on('claimedAtEnqueue', req => done.push(req.data.n))
    await cds.tx(async () => {
      for (let n = 0; n < 3; n++) await cds.queued(srv).emit('claimedAtEnqueue', { n })
    })
    await cds.flush()
    expect(done.sort()).toEqual([0, 1, 2])
  })

  test('keeps the process alive until it resolves', async () => {
    const { stdout } = await promisify(execFile)(process.execPath, [path.join(__dirname, '..', 'support', 'flush-child.js')], {
      cwd: APP,
      env: { ...process.env, CDS_CONFIG: JSON.stringify({ requires: { db: { kind: 'sqlite', credentials: { url: ':memory:' } } } }) },
      timeout: 30000
    })
    expect(stdout.trim().split('\n').pop()).toBe('flushed 20')
  })
})
