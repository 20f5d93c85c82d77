const { createDatabase, newDatabaseName, withClient } = require('../support/postgres')
const { startInstance, stopInstance, enqueueFromAnotherProcess } = require('../support/instances')
const { waitFor } = require('../support/wait')
const { onPortableStore } = require('../support/app')

/** The runner's listening connection, as the server sees it: its backend PID, or undefined while there is none. */
const LISTENING = `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND query LIKE 'LISTEN %' AND state = 'idle'`

// The portable store has no cross-instance wake-up (CQL has no LISTEN/NOTIFY): there, polling is what other
// instances have, which the second suite below shows. The native store's NOTIFY is the first.
;(onPortableStore() ? describe.skip : describe)('postgres multi-instance: wake-up', () => {
  const database = newDatabaseName()
  let instance
  const query = (sql, params) => withClient(client => client.query(sql, params), database)
  const listener = async () => (await query(LISTENING, [database])).rows[0]?.pid
  const handled = async () => Number((await query(`SELECT COUNT(*) AS n FROM test_records WHERE kind = 'handled' AND note = 'B'`)).rows[0].n)

  beforeAll(async () => {
    await createDatabase(database)
    // B polls only every 60 s: anything it does sooner, it does because it was notified.
    instance = await startInstance(database, { name: 'B', deploy: true, queue: { pollInterval: '60s' } })
    await waitFor(listener, { what: "B's listening connection" })
  }, 60000)

  afterAll(() => stopInstance(instance))

  // B's next poll is 60 s after its start: a dispatch within 20 s of the commit is the notification's doing, however
  // loaded the machine.
  test('a message committed by another process is dispatched by an idle instance at once, not at its next poll', async () => {
    await enqueueFromAnotherProcess(database, 1)
    await waitFor(async () => (await handled()) === 1, { timeout: 20000, what: 'B to dispatch the message' })
  })

  test('when its listening connection is killed, the instance reconnects and is woken again', async () => {
    const before = await listener()
    await query('SELECT pg_terminate_backend($1)', [before])
    const after = await waitFor(async () => {
      const pid = await listener()
      return pid !== before && pid
    }, { what: 'a new listening connection' })
    expect(after).not.toBe(before)
    const count = await handled()
    await enqueueFromAnotherProcess(database, 1)
    await waitFor(async () => (await handled()) === count + 1, { timeout: 20000, what: 'B to dispatch after reconnecting' })
  })
})

;(onPortableStore() ? describe : describe.skip)('postgres multi-instance on the portable store: polling', () => {
  const database = newDatabaseName()
  let instance
  const query = (sql, params) => withClient(client => client.query(sql, params), database)
  const handled = async () => Number((await query(`SELECT COUNT(*) AS n FROM test_records WHERE kind = 'handled' AND note = 'B'`)).rows[0].n)

  beforeAll(async () => {
    await createDatabase(database)
    instance = await startInstance(database, { name: 'B', deploy: true, queue: { pollInterval: '1s' } })
  }, 60000)

  afterAll(() => stopInstance(instance))

  test('a message committed by another process is dispatched by an idle instance at its next poll', async () => {
    await enqueueFromAnotherProcess(database, 1)
    await waitFor(async () => (await handled()) === 1, { timeout: 20000, what: 'B to poll and dispatch the message' })
    // no listening connection: the portable store sends and hears no notifications
    expect((await query(LISTENING, [database])).rows).toEqual([])
  })
})
