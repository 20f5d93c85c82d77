const { createDatabase, newDatabaseName, withClient } = require('../support/postgres')
const { startInstances, stopInstance, enqueueFromAnotherProcess } = require('../support/instances')
const { waitFor } = require('../support/wait')

const KEYS = 20
const PER_KEY = 50
const INSTANCES = ['A', 'B', 'C']

describe('postgres multi-instance: ordering keys', () => {
  const database = newDatabaseName()
  const running = []
  const query = (sql, params) => withClient(client => client.query(sql, params), database)

  beforeAll(async () => {
    await createDatabase(database)
    // Four at a time each, one message per slot: no instance can hold every key's head, so the others find heads due.
    const queue = { concurrency: 4, batchSize: 1 }
    running.push(...(await startInstances(database, INSTANCES.map(name => ({ name, queue, env: { ORDERED_MS: '10' } })))))
  }, 120000)

  afterAll(() => Promise.all(running.map(child => stopInstance(child))))

  test('3 instances, 20 keys × 50 messages, random delays: per key strictly in order, numbered 1..50 as they ran, never two runs at once', async () => {
    await enqueueFromAnotherProcess(database, PER_KEY, { KEYS: String(KEYS) })
    await waitFor(
      async () => {
        const { rows } = await query(`SELECT
          (SELECT COUNT(*) FROM cds_outbox_messages)::int AS pending,
          (SELECT COUNT(*) FROM test_records WHERE kind = 'ordered')::int AS handled`)
        return rows[0].pending === 0 && rows[0].handled >= KEYS * PER_KEY
      },
      { timeout: 150000, interval: 250, what: `${KEYS * PER_KEY} ordered messages handled and an empty queue` }
    )
    const { rows } = await query(`SELECT message AS key, note FROM test_records WHERE kind = 'ordered'`)
    expect(rows).toHaveLength(KEYS * PER_KEY)
    const byKey = new Map()
    for (const { key, note } of rows) byKey.set(key, [...(byKey.get(key) ?? []), JSON.parse(note)])
    expect(byKey.size).toBe(KEYS)
    const expected = Array.from({ length: PER_KEY }, (_, i) => i)
    const instances = new Set()
    for (const runs of byKey.values()) {
      runs.sort((a, b) => a.start - b.start)
      // In the order they started, the messages are 0..49: in order and without gaps or repeats; and so are the
      // numbers of the key's sequence, which the instances' claims gave them as they took them.
      expect(runs.map(r => r.seq)).toEqual(expected)
      expect(runs.map(r => r.number)).toEqual(expected.map(i => i + 1))
      // Each run ended before the next one of its key started, whichever instance ran it.
      for (let i = 1; i < runs.length; i++) expect(runs[i].start).toBeGreaterThanOrEqual(runs[i - 1].end)
      for (const r of runs) instances.add(r.instance)
    }
    // Several instances ran them: one holds at most 4 of the 20 keys at a time.
    expect(instances.size).toBeGreaterThanOrEqual(2)
  }, 200000)
})
