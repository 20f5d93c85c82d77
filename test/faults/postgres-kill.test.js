const { createDatabase, newDatabaseName, withClient } = require('../support/postgres')
const { expectNothingLostUnderKills } = require('../support/faults')

describe('faults: kill -9 on PostgreSQL', () => {
  const database = newDatabaseName()
  const query = async sql => (await withClient(client => client.query(sql), database)).rows

  beforeAll(() => createDatabase(database))

  test('3 instances draining 2000 messages, killed with SIGKILL 10 times: every effect once, nothing lost or stuck', async () => {
    const figures = await expectNothingLostUnderKills({
      database,
      query,
      messages: 2000,
      workers: 3,
      kills: 10,
      gap: [250, 700],
      // a short lease, so the killed instances' claims are taken over within seconds
      queue: { timeout: '2s', concurrency: 5, pollInterval: '500ms' },
      handlerMs: 60
    })
    console.log('kill -9 on PostgreSQL:', JSON.stringify(figures))
  })
})
