/**
 * One instance of the test app in a Node process of its own, as a scaled-out deployment runs it: the plugin, the
 * database from CDS_CONFIG (deployed first if TEST_APP_DEPLOY=yes) and a `record` handler that writes which instance ran which message.
 * Ready when it prints its URL; stopped with SIGTERM (cds serve shuts down gracefully).
 *
 * Fault suites shape the handler through the environment: HANDLER_MS (it waits this long before writing; it stops
 * waiting when `req.queue.signal` aborts), SLOW_EVERY/SLOW_MS (every n-th message by `data.n` waits SLOW_MS instead),
 * SIDE_EFFECTS (a file: each run first appends the message ID there, outside the transaction, like a remote call),
 * HOLD_TX (the handler's transaction runs a statement before it waits, so it holds a pooled connection meanwhile),
 * REMOTE_URL (where the `call` handler sends its request), RECORDS_BY=cql (records written with CQL INSERT, see
 * counting.js). POST /inbound hands an event to the inboxed `inbox` service.
 */
const fs = require('fs')
const path = require('path')

process.chdir(path.join(__dirname, '..', 'app'))
const cds = require('@sap/cds')
const { insertRecord, serveCounting } = require('./counting')

const { HANDLER_MS = '0', SLOW_EVERY, SLOW_MS = '0', SIDE_EFFECTS, HOLD_TX } = process.env

/** Waits `ms`, or rejects when `signal` aborts first. */
function pause(ms, signal) {
  if (ms <= 0) return
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms)
    signal.addEventListener('abort', () => {
      clearTimeout(timer)
      reject(signal.reason)
    }, { once: true })
  })
}

cds.on('served', async () => {
  const srv = await cds.connect.to('Target')
  srv.on('record', async req => {
    if (SIDE_EFFECTS) fs.appendFileSync(SIDE_EFFECTS, `${req.queue.messageId}\n`)
    if (HOLD_TX) await SELECT.one.from('test.Records')
    const slow = SLOW_EVERY && req.data.n % Number(SLOW_EVERY) === 0
    await pause(Number(slow ? SLOW_MS : HANDLER_MS), req.queue.signal)
    await insertRecord('handled', req.queue.messageId, process.env.INSTANCE)
  })
  // A remote system's client (REMOTE_URL, a server of the test on 127.0.0.1): one POST per attempt, saying who calls
  srv.on('call', async req => {
    const body = JSON.stringify({ n: req.data.n, attempt: req.queue.attempt, instance: process.env.INSTANCE })
    const res = await fetch(process.env.REMOTE_URL, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
    if (!res.ok) throw new Error(`the remote system answered ${res.status}`)
  })
  // Ordered messages: a random delay up to ORDERED_MS, then which instance ran which message (its `seq`, and the
  // number its key's sequence gave it) of which key, from when to when (epoch ms with microseconds, comparable across
  // processes on one machine).
  srv.on('ordered', async req => {
    const start = performance.timeOrigin + performance.now()
    await pause(Math.random() * Number(process.env.ORDERED_MS ?? 0), req.queue.signal)
    const end = performance.timeOrigin + performance.now()
    const note = JSON.stringify({ seq: req.data.seq, number: req.queue.sequence, instance: process.env.INSTANCE, start, end })
    await insertRecord('ordered', req.data.key, note)
  })
})
// A remote system that is down: every attempt of `unavailable` fails (a retry after the queue's backoff).
cds.on('served', async () => {
  const srv = await cds.connect.to('Target')
  srv.on('unavailable', () => {
    throw new Error(`the remote system is down (seen by instance ${process.env.INSTANCE})`)
  })
})
// Rows of older CAP versions name the messaging service as their target: its subscriber records what it received.
cds.on('served', async () => {
  const messaging = await cds.connect.to('messaging')
  messaging.on('legacyPing', req => insertRecord('messaging', String(req.data.n), process.env.INSTANCE))
})
// POST /inbound { id }: an event arrives for the inboxed `inbox` service as a broker adapter hands it over (answered
// once its inbox row committed); its subscriber records it. A redelivered id is dropped by the inbox's receipts.
cds.on('bootstrap', app => {
  app.post('/inbound', require('express').json(), async (req, res) => {
    const inbox = await cds.connect.to('inbox')
    await inbox.processInboundMsg({ user: cds.User.privileged }, { event: 'orders/received', data: { id: req.body.id }, headers: { id: req.body.id } })
    res.json({ received: req.body.id })
  })
})
cds.on('served', async () => {
  const inbox = await cds.connect.to('inbox')
  inbox.on('orders/received', msg => insertRecord('inbound', msg.data.id, process.env.INSTANCE))
})
// POST /schedule { n, after, as }: a `record` task for Target, due `after` (a duration) from now by this process's clock.
cds.on('bootstrap', app => {
  app.post('/schedule', require('express').json(), async (req, res) => {
    const { n, after, as } = req.body
    const srv = await cds.connect.to('Target')
    await cds.tx(() => srv.schedule('record', { n }).after(after).as(as))
    res.json({ scheduled: as })
  })
})
// The rolling-upgrade suite's counting handler and enqueue route, the same as CAP's own instances have.
serveCounting(process.env.INSTANCE, { handlerMs: Number(process.env.COUNT_MS ?? 0) })
cds.on('listening', ({ url }) => console.log(`instance ${process.env.INSTANCE} listening on ${url}`))

cds.exec('--port', '0')
