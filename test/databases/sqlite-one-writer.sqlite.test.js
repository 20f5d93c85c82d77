const { newDatabaseFile } = require('../support/app')
const { startInstance, stopInstance } = require('../support/instances')
const { waitFor } = require('../support/wait')

/**
 * SQLite has one writer at a time: a second app process served on the same SQLite file makes requests of both fail
 * with "database is locked" under load. Its start says so, naming the other process; one process alone says nothing.
 */
jest.setTimeout(180000)

describe('two app processes on one SQLite file', () => {
  const database = { kind: 'sqlite', credentials: { url: newDatabaseFile() } }
  const running = []
  const start = async (name, deploy) => {
    // the queue's debug log says when the runner has started, i.e. checked the file
    const child = await startInstance(database, { name, deploy, env: { CDS_LOG_LEVELS_QUEUE: 'debug' } })
    running.push(child)
    await waitFor(() => /runner \S+ started/.test(child.output), { timeout: 60000, what: `the runner of ${name} to start` })
    return child
  }
  afterAll(() => Promise.all(running.map(child => stopInstance(child))))

  test('the second process warns at start that another one serves the file, naming its PID and what to do', async () => {
    const first = await start('first', true)
    const second = await start('second', false)
    expect(second.output).toContain(`another app process (PID ${first.pid}) serves the SQLite database ${database.credentials.url} too`)
    expect(second.output).toContain('Serve a SQLite file from one process, or use PostgreSQL for several instances')
    expect(first.output).not.toContain('another app process')
  })

  test('once the other process has stopped, a new one starts without the warning', async () => {
    for (const child of running.splice(0)) await stopInstance(child)
    const third = await start('third', false)
    expect(third.output).not.toContain('another app process')
  })
})
