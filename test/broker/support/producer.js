/**
 * The producer app of the end-to-end suite, in a process of its own: the test app (test/app) with a messaging service
 * `broker` of kind redis-streams (from CDS_CONFIG), queued by default as every messaging service. Its business
 * transactions (POST /orders) each write orders (rows of test_Records, kind 'order') and emit `orders/created` for
 * each on the broker; some are rolled back on purpose. GET /relay-stats: what the runner's relay attempts came to.
 */
const path = require('path')

process.chdir(path.join(__dirname, '..', '..', 'app'))
const cds = require('@sap/cds')
const { insertRecord } = require('../../support/counting')

const outcomes = { succeeded: 0, retry: 0, dead: 0 }

cds.on('bootstrap', app => {
  // { from, count, perTx, rollbackEvery }: orders from..from+count-1, perTx per transaction, every rollbackEvery-th transaction rolled back
  app.post('/orders', require('express').json(), async (req, res) => {
    const { from, count, perTx, rollbackEvery } = req.body
    const broker = await cds.connect.to('broker')
    const committed = []
    for (let start = from, tx = 1; start < from + count; start += perTx, tx++) {
      const orders = Array.from({ length: Math.min(perTx, from + count - start) }, (_, i) => start + i)
      const rollback = tx % rollbackEvery === 0
      await cds.tx(async () => {
        for (const n of orders) {
          await insertRecord('order', String(n), '')
          await broker.emit('orders/created', { n })
        }
        if (rollback) throw Object.assign(new Error('rolled back on purpose'), { rollback })
      }).then(() => committed.push(...orders), e => {
        if (!e.rollback) throw e
      })
    }
    res.json({ committed: committed.length })
  })
  app.get('/relay-stats', (_, res) => res.json(outcomes))
})
cds.on('served', () => {
  require('../../../lib/plugin').eventQueues().runner.monitor.on('outcome', ({ kind }) => (outcomes[kind] = (outcomes[kind] ?? 0) + 1))
})
cds.on('listening', ({ url }) => console.log(`instance ${process.env.INSTANCE} listening on ${url}`))

cds.exec('--port', '0')
