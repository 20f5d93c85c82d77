const { startApp, onPortableStore } = require('../support/app')

startApp()

describe('the store', () => {
  test(`this suite runs on the ${onPortableStore() ? 'portable' : 'native'} store, as cds.requires.queue.store says`, () => {
    const { runner, settings } = require('../../lib/plugin').eventQueues()
    expect(settings.runner.store).toBe(onPortableStore() ? 'portable' : 'auto')
    expect(runner.store.constructor.name).toBe(onPortableStore() ? 'PortableStore' : 'NativeStore')
  })

  test('the portable store has no wake-up across processes and no savepoint batches; the native one has both where the database does', () => {
    const { runner } = require('../../lib/plugin').eventQueues()
    const { batches } = require('../../lib/store/queue-store')
    expect(batches(runner.store)).toBe(!onPortableStore())
    const listens = !onPortableStore() && require('@sap/cds').db.kind === 'postgres'
    expect(runner.store.listenStatement).toBe(listens ? 'LISTEN cds_event_queues' : undefined)
  })
})
