/**
 * The consumer app of the end-to-end suite, in a process of its own: the test app (test/app) subscribed to
 * `orders/created` on its messaging service `broker` (redis-streams, `inboxed: true`, from CDS_CONFIG). The subscriber
 * writes a row per event it handles (test_Records, kind 'received', the order number and the event's CloudEvents id),
 * in its own transaction, the inbox's.
 */
const path = require('path')

process.chdir(path.join(__dirname, '..', '..', 'app'))
const cds = require('@sap/cds')
const { insertRecord } = require('../../support/counting')

cds.on('served', async () => {
  const broker = await cds.connect.to('broker')
  broker.on('orders/created', msg => insertRecord('received', String(msg.data.n), String(msg.headers.id)))
})
cds.on('listening', ({ url }) => console.log(`instance ${process.env.INSTANCE} listening on ${url}`))

cds.exec('--port', '0')
