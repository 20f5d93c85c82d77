const { createDatabase, newDatabaseName, withClient } = require('../support/postgres')
const { startInstances, stopInstance, enqueueFromAnotherProcess } = require('../support/instances')
const { waitFor } = require('../support/wait')

// Three app processes against one database, in different time zones (timestamps must mean the same in all of them).
const INSTANCES = [
  { name: 'A', env: { TZ: 'UTC' } },
  { name: 'B', env: { TZ: 'America/New_York' } },
  { name: 'C', env: { TZ: 'Asia/Kolkata' } }
]
const MESSAGES = 3000

describe('postgres multi-instance: claiming', () => {
  const database = newDatabaseName()
  const running = []
  const query = (sql, params) => withClient(client => client.query(sql, params), database)

  beforeAll(async () => {
    await createDatabase(database)
    running.push(...(await startInstances(database, INSTANCES)))
  }, 120000)

  afterAll(() => Promise.all(running.map(child => stopInstance(child))))

  test('3 instances process 3000 messages exactly once between them, each doing part of the work', async () => {
    await enqueueFromAnotherProcess(database, MESSAGES)
    await waitFor(
      async () => {
        const { rows } = await query(`SELECT
          (SELECT COUNT(*) FROM cds_outbox_messages)::int AS pending,
          (SELECT COUNT(*) FROM test_records WHERE kind = 'handled')::int AS handled`)
        return rows[0].pending === 0 && rows[0].handled >= MESSAGES
      },
      { timeout: 120000, interval: 200, what: `${MESSAGES} handled messages and an empty queue` }
    )
    const runs = await query(`SELECT COUNT(*)::int AS runs, COUNT(DISTINCT message)::int AS messages
      FROM test_records WHERE kind = 'handled'`)
    expect(runs.rows[0]).toEqual({ runs: MESSAGES, messages: MESSAGES })
    const { rows: perInstance } = await query(`SELECT note AS instance, COUNT(*)::int AS runs
      FROM test_records WHERE kind = 'handled' GROUP BY note ORDER BY note`)
    expect(perInstance.map(r => r.instance)).toEqual(['A', 'B', 'C'])
    for (const { runs } of perInstance) expect(runs).toBeGreaterThan(0)
    console.log(`runs per instance: ${perInstance.map(r => `${r.instance}=${r.runs}`).join(', ')}`)
  }, 180000)
})
