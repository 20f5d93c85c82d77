const { newDatabaseFile, onPostgres } = require('../support/app')
const { runOneOff, startFailing } = require('../support/instances')

/** How long a failed start may take to end the process: without the plugin it takes about a second. */
const LIMIT = 8000

/** A new database with the app's model deployed, as `cds deploy` leaves it before the app starts. */
async function deployedDatabase() {
  let database = { kind: 'sqlite', credentials: { url: newDatabaseFile() } }
  if (onPostgres()) {
    const postgres = require('../support/postgres')
    database = postgres.newDatabaseName()
    await postgres.createDatabase(database)
  }
  await runOneOff(database, 'deploy')
  return database
}

describe('startup', () => {
  test.each([
    ['throw', /the app failed to start \(test\)/],
    ['schedule', /Invalid interval of Target\.schedule\("tick"\)\.every\(\): "soon"/]
  ])('an app whose served handler fails (%s) prints the error and exits with code 1 within seconds, as without the plugin', async (failure, error) => {
    const { code, output, ms } = await startFailing(await deployedDatabase(), failure, LIMIT)
    expect({ code, ms: ms < LIMIT }).toEqual({ code: 1, ms: true })
    expect(output).toMatch(error)
    expect(output).not.toMatch(/listening on/)
  })
})
