/**
 * The consumer app of the end-to-end suite, in a process of its own: the test app (test/app) subscribed to
 * `orders/created` on its messaging service `broker` (redis-streams, `inboxed: true`, from CDS_CONFIG). The subscriber
 * writes a row per event it handles (test_Records, kind 'received', the order number and the event's CloudEvents id),
 * in its own transaction, the inbox's. HANDLE_MS: the subscriber first takes this long (a slow subscriber).
 */
const path = require('path')

process.chdir(path.join(__dirname, '..', '..', 'app'))
const cds = require('@sap/cds')
const { insertRecord } = require('../../support/counting')

const HANDLE_MS = Number(process.env.HANDLE_MS ?? 0)

cds.on('served', async () => {
  const broker = await cds.connect.to('broker')
  broker.on('orders/created', async msg => {
    if (HANDLE_MS) await new Promise(resolve => setTimeout(resolve, HANDLE_MS))
    await insertRecord('received', String(msg.data.n), String(msg.headers.id))
  })
})
cds.on('listening', ({ url }) => console.log(`instance ${process.env.INSTANCE} listening on ${url}`))

cds.exec('--port', '0')
