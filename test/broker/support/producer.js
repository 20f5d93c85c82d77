/**
 * The producer app of the end-to-end suite, in a process of its own: the test app (test/app) with a messaging service
 * `broker` of kind redis-streams (from CDS_CONFIG), queued by default as every messaging service. Its business
 * transactions (started by POST /orders, followed by GET /orders) each write orders (rows of test_Records, kind
 * 'order') and emit `orders/created` for each on the broker; some are rolled back on purpose. GET /relay-stats: what
 * the runner's relay attempts came to, and the most retries one event needed. POST /local { count }: queues `count`
 * calls of the app's own service Target (event `local`, on the same queue as the relays), whose handler writes a row
 * of kind 'local'.
 */
const path = require('path')

process.chdir(path.join(__dirname, '..', '..', 'app'))
const cds = require('@sap/cds')
const { insertRecord } = require('../../support/counting')

const outcomes = { succeeded: 0, retry: 0, dead: 0, mostRetriesOfOneEvent: 0 }
const retriesOf = new Map()

/** The orders being placed: POST /orders starts it, GET /orders tells how far it is (one long request would time out). */
let placing = { done: true, committed: 0 }

/** Orders from..from+count-1, perTx per transaction, every rollbackEvery-th transaction rolled back. */
async function placeOrders({ from, count, perTx, rollbackEvery }, progress) {
  const broker = await cds.connect.to('broker')
  for (let start = from, tx = 1; start < from + count; start += perTx, tx++) {
    const orders = Array.from({ length: Math.min(perTx, from + count - start) }, (_, i) => start + i)
    const rollback = tx % rollbackEvery === 0
    await cds.tx(async () => {
      for (const n of orders) {
        await insertRecord('order', String(n), '')
        await broker.emit('orders/created', { n })
      }
      if (rollback) throw Object.assign(new Error('rolled back on purpose'), { rollback })
    }).then(() => (progress.committed += orders.length), e => {
      if (!e.rollback) throw e
    })
  }
}

cds.on('bootstrap', app => {
  app.post('/orders', require('express').json(), (req, res) => {
    const progress = (placing = { done: false, committed: 0 })
    placeOrders(req.body, progress).then(() => (progress.done = true), e => Object.assign(progress, { done: true, error: e.message }))
    res.status(202).json(progress)
  })
  app.get('/orders', (_, res) => res.json(placing))
  app.get('/relay-stats', (_, res) => res.json(outcomes))
  app.post('/local', require('express').json(), async (req, res) => {
    const target = cds.queued(await cds.connect.to('Target'))
    await cds.tx(async () => {
      for (let n = 0; n < req.body.count; n++) await target.emit('local', { n })
    })
    res.json({ queued: req.body.count })
  })
})
cds.on('served', async () => {
  const target = await cds.connect.to('Target')
  target.on('local', req => insertRecord('local', String(req.data.n), ''))
  require('../../../lib/plugin').eventQueues().runner.monitor.on('outcome', ({ ID, kind }) => {
    outcomes[kind] = (outcomes[kind] ?? 0) + 1
    // how close an outage brought one event to its maxAttempts
    if (kind !== 'retry') return
    const retries = (retriesOf.get(ID) ?? 0) + 1
    retriesOf.set(ID, retries)
    outcomes.mostRetriesOfOneEvent = Math.max(outcomes.mostRetriesOfOneEvent, retries)
  })
})
cds.on('listening', ({ url }) => console.log(`instance ${process.env.INSTANCE} listening on ${url}`))

cds.exec('--port', '0')
