const { newDatabaseFile, onPostgres } = require('../support/app')
const { createDatabase, newDatabaseName, withClient } = require('../support/postgres')
const { expectNothingLostUnderKills } = require('../support/faults')

/**
 * kill -9 on each database, the one of the jest project: the same scenario, with what differs per database. SQLite
 * serves one processing instance (see README): one process, killed and restarted over and over. PostgreSQL: three
 * instances share the table, and a killed one's claims are taken over by the others.
 */
const DATABASES = [
  {
    name: 'SQLite',
    kind: 'sqlite',
    async open() {
      const file = newDatabaseFile()
      const db = new (require('better-sqlite3'))(file)
      return { database: { kind: 'sqlite', credentials: { url: file } }, query: async sql => db.prepare(sql).all(), close: () => db.close() }
    },
    instances: 1,
    gap: [300, 700],
    queue: { timeout: '2s', concurrency: 10, pollInterval: '500ms' },
    handlerMs: 50
  },
  {
    name: 'PostgreSQL',
    kind: 'postgres',
    async open() {
      const database = newDatabaseName()
      await createDatabase(database)
      return { database, query: async sql => (await withClient(client => client.query(sql), database)).rows, close: () => {} }
    },
    instances: 3,
    gap: [250, 700],
    // a short lease, so the killed instances' claims are taken over within seconds
    queue: { timeout: '2s', concurrency: 5, pollInterval: '500ms' },
    handlerMs: 60
  }
]

describe.each(DATABASES.filter(d => (d.kind === 'postgres') === onPostgres()))('faults: kill -9 on $name', spec => {
  let opened

  beforeAll(async () => {
    opened = await spec.open()
  })
  afterAll(() => opened?.close())

  const instances = spec.instances === 1 ? 'one instance' : `${spec.instances} instances`
  test(`${instances} draining 2000 messages, killed with SIGKILL 10 times: every effect once, nothing lost or stuck`, async () => {
    const figures = await expectNothingLostUnderKills({
      database: opened.database,
      query: opened.query,
      messages: 2000,
      workers: spec.instances,
      kills: 10,
      gap: spec.gap,
      queue: spec.queue,
      handlerMs: spec.handlerMs
    })
    console.log(`kill -9 on ${spec.name}:`, JSON.stringify(figures))
  })
})
