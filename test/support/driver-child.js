// Connects the test app to the database of CDS_CONFIG (run with cwd = test/app), starts the runner as serving does,
// queues one message, flushes and prints as JSON which store ran it, what the handler saw and whether the database's
// clock, read as the queue reads it, said a time within its round trip (the database runs in this process: the same
// clock, to the millisecond). A start that fails prints its error and exits 3; a configuration error ends it with 1
// before that, as it ends an app's start (lib/start-failure.ts).
const cds = require('@sap/cds')
const { readDatabaseClock } = require('../../lib/store/database-time')

;(async () => {
  await cds.plugins
  let db
  try {
    db = await cds.connect.to('db')
  } catch (e) {
    console.error(e.message)
    process.exit(3)
  }
  await cds.deploy('*').to(db)
  const srv = cds.unqueued(await cds.connect.to('Outboxed'))
  const seen = []
  srv.on('ping', req => void seen.push(req.data))
  await cds.emit('served', cds.services)
  await cds.tx(() => cds.queued(srv).emit('ping', { n: 1 }))
  await cds.flush()
  const { runner } = require('../../lib/plugin').eventQueues()
  const left = (await SELECT.from('cds.outbox.Messages')).length
  const before = Date.now()
  const { time } = await readDatabaseClock(db)
  const clockInRoundTrip = before <= time && time <= Date.now()
  console.log(JSON.stringify({ store: runner.store.constructor.name, seen, left, clockInRoundTrip }))
  await cds.shutdown()
})()
