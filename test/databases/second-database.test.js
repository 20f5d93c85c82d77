const { startApp } = require('../support/app')
const { messages } = require('../support/outbox')
const cds = require('@sap/cds')

startApp({ requires: { queue: { pollInterval: '1h' } } })

// An app may connect a database service besides its primary one (an archive, a reporting replica) and disconnect it
// when done: the queue lives in the primary database (cds.db) and runs on.
describe('a second database service', () => {
  test('disconnecting it leaves the runner running: a queued call after it is processed', async () => {
    const archive = await cds.connect.to('archive', { kind: 'sqlite', credentials: { url: ':memory:' } })
    await archive.run('SELECT 1 AS one')
    await archive.disconnect()
    const target = await cds.connect.to('Target')
    const runs = []
    target.on('afterArchive', req => void runs.push(req.data.n))
    await cds.tx(() => cds.queued(target).emit('afterArchive', { n: 1 }))
    await cds.flush()
    expect(runs).toEqual([1])
    expect(await messages()).toEqual([])
  })
})
