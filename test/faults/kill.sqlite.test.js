const { newDatabaseFile } = require('../support/app')
const { expectNothingLostUnderKills } = require('../support/faults')

// SQLite serves one processing instance (see README): one process, killed and restarted over and over.
describe('faults: kill -9 on SQLite', () => {
  const file = newDatabaseFile()
  const database = { kind: 'sqlite', credentials: { url: file } }
  let db
  const query = async sql => db.prepare(sql).all()

  beforeAll(() => {
    db = new (require('better-sqlite3'))(file)
  })
  afterAll(() => db.close())

  test('one instance draining 2000 messages, killed with SIGKILL 10 times: every effect once, nothing lost or stuck', async () => {
    const figures = await expectNothingLostUnderKills({
      database,
      query,
      messages: 2000,
      workers: 1,
      kills: 10,
      gap: [300, 700],
      queue: { timeout: '2s', concurrency: 10, pollInterval: '500ms' },
      handlerMs: 50
    })
    console.log('kill -9 on SQLite:', JSON.stringify(figures))
  })
})
