const { createDatabase, newDatabaseName, withClient } = require('../support/postgres')
const { enqueueFromAnotherProcess, startInstances, stopInstance } = require('../support/instances')
const { sideEffects, sideEffectsFile } = require('../support/faults')
const { waitFor } = require('../support/wait')
const { onPortableStore } = require('../support/app')

/**
 * The default concurrency (10) equals @cap-js/postgres's default pool (10 connections). Ten handlers that hold their
 * transaction while they wait for a slow remote call take every pooled connection: the renewals of their leases must
 * still be written, or another instance takes the messages over and runs them a second time. The native store renews
 * on a connection of its own; the portable store has none outside CAP's pool (README, Databases: keep the pool above
 * `concurrency` there), so this is the native store's guarantee.
 */
;(onPortableStore() ? describe.skip : describe)('faults: lease renewals while the handler slots hold every pooled connection (PostgreSQL)', () => {
  const database = newDatabaseName()
  const query = async sql => (await withClient(client => client.query(sql), database)).rows
  let running = []

  beforeAll(() => createDatabase(database))
  afterAll(() => Promise.all(running.map(child => stopInstance(child))))

  test('ten handlers holding a transaction for 6 s with a 2 s lease each run once, though a second instance is ready to take over', async () => {
    const effects = sideEffectsFile()
    const env = { HANDLER_MS: '6000', HOLD_TX: '1', SIDE_EFFECTS: effects }
    const queue = { timeout: '2s', pollInterval: '200ms' }
    running = await startInstances(database, [{ name: 'A', queue, env }])
    await enqueueFromAnotherProcess(database, 10)
    // A takes all ten (its ten slots), then B starts: ready to take over whatever lease A does not renew
    await waitFor(() => sideEffects(effects).size === 10, { timeout: 20000, what: 'ten started handlers in A' })
    running.push(...(await startInstances(database, [{ name: 'B', queue, env }])).slice(0))
    await waitFor(async () => (await query(`SELECT COUNT(*)::int AS n FROM test_records WHERE kind = 'handled'`))[0].n >= 10, {
      timeout: 60000, what: 'ten handled messages'
    })
    const runs = [...sideEffects(effects).values()]
    expect(runs).toHaveLength(10)
    expect(runs.filter(n => n > 1)).toEqual([])
    const [{ n: left }] = await query('SELECT COUNT(*)::int AS n FROM cds_outbox_messages')
    expect(left).toBe(0)
  }, 90000)
})
