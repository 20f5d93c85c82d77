const { startServer, haltServer, restartServer, stopServer, createDatabase, newDatabaseName, withClient, dbConfig } = require('../support/postgres')
const { startInstance, stopInstance, enqueueFromAnotherProcess } = require('../support/instances')
const { counts, drained } = require('../support/faults')
const { waitFor, sleep } = require('../support/wait')

const MESSAGES = 2000
const OUTAGE = 5000

// A server of its own: stopping it must not disturb the other suites' databases.
describe('faults: PostgreSQL outage', () => {
  let server, db
  const running = []
  const database = newDatabaseName()
  const query = async sql => (await withClient(client => client.query(sql), database, server)).rows

  beforeAll(async () => {
    server = await startServer()
    await createDatabase(database, server)
    db = dbConfig(database, server)
  }, 60000)
  afterAll(async () => {
    await Promise.all(running.map(child => stopInstance(child)))
    if (server) await stopServer(server)
  })

  test('the database stops for 5 s mid-drain: instances log it, back off, recover without restart, lose nothing', async () => {
    await enqueueFromAnotherProcess(db, MESSAGES, {}, { deploy: true })
    const queue = { timeout: '3s', concurrency: 5, pollInterval: '500ms' }
    const env = { HANDLER_MS: '40', CDS_LOG_LEVELS_QUEUE: 'info' }
    for (const name of ['A', 'B']) running.push(await startInstance(db, { name, queue, env: { ...env } }))
    await waitFor(async () => (await counts(query)).handled >= MESSAGES / 5, { timeout: 60000, what: 'a fifth of the drain' })
    const before = await counts(query)
    await haltServer(server)
    const down = Date.now()
    await sleep(OUTAGE)
    await restartServer(server)
    const up = Date.now()
    const final = await drained(query, MESSAGES)
    const recovered = Date.now()
    expect(final).toEqual({ pending: 0, processing: 0, dead: 0, runs: MESSAGES, handled: MESSAGES })
    for (const child of running) {
      // the same processes, never restarted, said what happened (the tail of its output shows why if not)
      expect({ exitCode: child.exitCode, tail: child.exitCode === null ? '' : child.output.slice(-3000) }).toEqual({ exitCode: null, tail: '' })
      // Noticed by a claim, or by the lease renewals of a batch that held the slots through the outage; then recovered.
      expect(child.output).toMatch(/claiming messages failed|could not renew the lease/)
      expect(child.output).toMatch(/database reachable again|renewed the lease of .+ again after/)
    }
    console.log('PostgreSQL outage:', JSON.stringify({
      handledBeforeOutage: before.handled, outageMs: up - down, drainAfterRestartMs: recovered - up,
      logLines: running.map(c => c.output.split('\n').filter(l => /\[queue\]/.test(l)).length)
    }))
  })
})
