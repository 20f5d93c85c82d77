const { newDatabaseFile, onPostgres, onPortableStore } = require('../support/app')
const { sideEffects, sideEffectsFile, stopAll } = require('../support/faults')
const { startInstance } = require('../support/instances')
const { waitFor } = require('../support/wait')

/**
 * kill -9 of a process holding far more messages than it runs: claimed at enqueue, and batches of a backlog whose
 * rest has not started. With `maxAttempts: 1`, every message charged for the kill would be a dead letter; only an
 * attempt that started may count, so no dead letter may be a message that never ran. The portable store has neither
 * batches nor, with batchSize 1, unstarted rows in a slot (README, Databases): the scenario is the native store's.
 */
;(onPortableStore() ? describe.skip : describe)('faults: kill -9 while holding unstarted messages (batching, claim at enqueue, maxAttempts 1)', () => {
  let database, query, close
  const running = []

  beforeAll(async () => {
    if (onPostgres()) {
      const { createDatabase, newDatabaseName, withClient } = require('../support/postgres')
      const name = newDatabaseName()
      await createDatabase(name)
      database = name
      query = async sql => (await withClient(client => client.query(sql), name)).rows
      close = () => {}
    } else {
      const file = newDatabaseFile()
      database = { kind: 'sqlite', credentials: { url: file } }
      const db = new (require('better-sqlite3'))(file)
      query = async sql => db.prepare(sql).all()
      close = () => db.close()
    }
  })
  afterAll(async () => {
    await stopAll(running)
    close()
  })

  test('a process killed 3 started messages into a 300-message backlog leaves no dead letter that never ran', async () => {
    const effects = sideEffectsFile()
    const options = {
      queue: { maxAttempts: 1, timeout: '2s', concurrency: 2, pollInterval: '500ms' },
      env: { HANDLER_MS: '100', SIDE_EFFECTS: effects }
    }
    const first = await startInstance(database, { ...options, name: 'first', deploy: true })
    // one transaction of this process: two messages claimed at enqueue for its two slots, the rest claimed in batches
    await fetch(`${first.url}/enqueue`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ from: 0, count: 300, event: 'record' })
    })
    await waitFor(() => sideEffects(effects).size >= 3, { what: 'three started messages' })
    process.kill(first.pid, 'SIGKILL')
    await new Promise(resolve => first.once('exit', resolve))
    const started = sideEffects(effects).size
    const [{ held }] = await query(`SELECT COUNT(*) AS "held" FROM cds_outbox_Messages WHERE status = 'processing'`)
    running.push(await startInstance(database, { ...options, name: 'second' }))
    const left = await waitFor(async () => {
      const [row] = await query(`SELECT
        (SELECT COUNT(*) FROM cds_outbox_Messages WHERE dueAt IS NOT NULL) AS "pending",
        (SELECT COUNT(*) FROM cds_outbox_Messages WHERE dueAt IS NULL) AS "dead"`)
      return Number(row.pending) === 0 && row
    }, { timeout: 120000, interval: 200, what: 'every message handled or dead' })
    const dead = (await query('SELECT ID AS "ID" FROM cds_outbox_Messages WHERE dueAt IS NULL')).map(r => r.ID)
    const ran = sideEffects(effects)
    const neverRan = dead.filter(ID => !ran.has(ID))
    console.log(`kill with unstarted messages held: held ${held}, started at the kill ${started}, dead letters ${left.dead}, of which never ran ${neverRan.length}`)
    expect(Number(held)).toBeGreaterThan(started)
    expect(neverRan).toEqual([])
    expect(ran.size).toBe(300)
  })
})
