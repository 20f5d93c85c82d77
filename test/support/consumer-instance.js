/**
 * One CAP app of the consumer-half suites in a Node process of its own: the test app (test/app) on the database of
 * CDS_CONFIG, as a sender or a receiver of another such process. Ready when it prints its URL; stopped by its PID.
 *
 * Sender (ROLE=sender): POST /odata/v4/target/act { value } queues, in the request's transaction, a call of the
 * remote service `ReceiverApi` (POST /book, configured in CDS_CONFIG) when REMOTE is set, else the event
 * `orders/paid` on the messaging service `bus`. CRASH_AFTER_PUBLISH: the first event `bus` publishes kills this
 * process (SIGKILL) right after the broker took it, before the queue records it as done.
 *
 * Receiver (ROLE=receiver): the action Receiver.book writes a booking and prints each attempt's Idempotency-Key;
 * KILL_FILE names a file holding a PID, killed (SIGKILL) once the first booking has committed, before it is answered;
 * with RELEASE_FILE a booking prints `booking` and waits until that file exists before it commits.
 * `bus` prints the CloudEvents id of each inbound copy the broker hands over; its subscriber of `orders/paid` writes
 * a record and prints the id of the message it processes.
 *
 * GET /pending and GET /receipts answer the rows of the app's queue table and of its receipts.
 */
const fs = require('fs')
const path = require('path')

process.chdir(path.join(__dirname, '..', 'app'))
const cds = require('@sap/cds')
const { insertRecord } = require('./counting')

const { ROLE, REMOTE, CRASH_AFTER_PUBLISH, KILL_FILE, RELEASE_FILE } = process.env

/** Resolves once `file` exists. */
async function released(file) {
  while (!fs.existsSync(file)) await new Promise(resolve => setTimeout(resolve, 20))
}

if (ROLE === 'sender') {
  cds.on('served', async () => {
    const target = await cds.connect.to('Target')
    target.on('act', async req => {
      if (REMOTE) await (await cds.connect.to('ReceiverApi')).send({ method: 'POST', path: '/book', data: { flight: req.data.value, seats: 1 } })
      else await (await cds.connect.to('bus')).emit('orders/paid', { order: req.data.value })
      return 'queued'
    })
    if (!cds.env.requires.bus) return
    const bus = cds.unqueued(await cds.connect.to('bus'))
    const handle = bus.handle
    bus.handle = async function (msg) {
      const published = await handle.call(this, msg)
      if (msg.inbound) return published
      console.log(`published ${msg.event}`)
      if (CRASH_AFTER_PUBLISH) process.kill(process.pid, 'SIGKILL')
      return published
    }
  })
}

if (ROLE === 'receiver') {
  cds.on('served', async () => {
    const receiver = await cds.connect.to('Receiver')
    receiver.before('book', req => console.log(`attempt ${req.headers['idempotency-key']}`))
    let killed = false
    receiver.on('book', async req => {
      const ID = cds.utils.uuid()
      await insertRecord('booking', req.data.flight, ID)
      if (RELEASE_FILE) {
        console.log(`booking ${req.data.flight}`)
        await released(RELEASE_FILE)
      }
      req.on('succeeded', () => {
        if (killed || !KILL_FILE) return
        killed = true
        process.kill(Number(fs.readFileSync(KILL_FILE, 'utf8')), 'SIGKILL')
      })
      return { ID, seats: req.data.seats }
    })
    if (!cds.env.requires.bus) return
    const bus = await cds.connect.to('bus')
    // each copy the broker hands over, before the inbox decides about it
    const broker = cds.unqueued(bus)
    const processInboundMsg = broker.processInboundMsg
    broker.processInboundMsg = function (ctx, msg) {
      console.log(`inbound ${msg.headers?.id}`)
      return processInboundMsg.call(this, ctx, msg)
    }
    bus.on('orders/paid', async msg => {
      console.log(`received ${msg.headers.id}`)
      await insertRecord('paid', msg.data.order, msg.headers.id)
    })
  })
}

// what is left in this app's queue, and what its receivers recorded, for the suite to see
cds.on('bootstrap', app => {
  app.get('/pending', async (_, res) => res.json(await SELECT.from('cds.outbox.Messages')))
  app.get('/receipts', async (_, res) => res.json(await SELECT.from('cds.outbox.Receipts')))
})
cds.on('listening', ({ url }) => console.log(`instance ${process.env.INSTANCE} listening on ${url}`))
cds.exec('--port', '0')
