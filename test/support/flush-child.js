// A process that enqueues work and calls cds.flush() as its last act: it prints "flushed" only if flush keeps the
// event loop alive until all messages are processed. Run with cwd = test/app.
const cds = require('@sap/cds')

;(async () => {
  await cds.plugins
  const db = await cds.connect.to('db')
  await cds.deploy('*').to(db)
  const srv = cds.unqueued(await cds.connect.to('Outboxed'))
  let handled = 0
  srv.on('slow', async () => {
    // Timers that do not hold the process: only flush() may keep it alive.
    await new Promise(resolve => setTimeout(resolve, 20).unref())
    handled++
  })
  const queued = await cds.connect.to('Outboxed')
  await cds.tx(async () => {
    for (let i = 0; i < 20; i++) await queued.emit('slow', { i })
  })
  cds.flush().then(() => console.log(`flushed ${handled}`))
})()
