const fs = require('fs')
const os = require('os')
const path = require('path')
const { onPortableStore } = require('../support/app')
const { startInstances, stopInstance } = require('../support/instances')
const { newDatabaseName, createDatabase, dbConfig, withClient } = require('../support/postgres')
const { waitFor } = require('../support/wait')

// @idempotent operations across instances on PostgreSQL (README, the consumer half): a request with a key another
// instance is still running gets 409 at once, not a second run; once the first committed, every instance answers
// from the record. Two processes of the test app on one database. Native store only: the portable store has no such
// lock (CQL has none), there the second request runs and gets 409 when it records the key (idempotent-operations).
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'event-queues-idempotent-'))
const release = path.join(dir, 'release')
const instances = []
afterAll(() => Promise.all(instances.map(child => stopInstance(child))))
afterEach(() => fs.rmSync(release, { force: true }))

const book = (instance, key, flight = 'LH900') =>
  fetch(`${instance.url}/odata/v4/receiver/book`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'Idempotency-Key': `"${key}"` },
    body: JSON.stringify({ flight, seats: 1 })
  })

;(onPortableStore() ? test.skip : test)('a request whose key runs in another instance gets 409; after the commit both instances answer from the record', async () => {
  const database = newDatabaseName()
  await createDatabase(database)
  const env = { ROLE: 'receiver', RELEASE_FILE: release }
  const [a, b] = await startInstances(database, [{ script: 'consumer-instance.js', name: 'a', env }, { script: 'consumer-instance.js', name: 'b', env }])
  instances.push(a, b)
  const first = book(a, 'k-instances')
  await waitFor(() => a.output.includes('booking LH900'), { timeout: 30000, what: "the booking running in instance a" })
  const concurrent = await book(b, 'k-instances')
  expect(concurrent.status).toBe(409)
  fs.writeFileSync(release, '')
  const answered = await first
  expect(answered.status).toBe(200)
  const body = await answered.json()
  for (const instance of [a, b]) {
    const again = await book(instance, 'k-instances')
    expect(again.status).toBe(200)
    expect((await again.json()).ID).toBe(body.ID)
  }
  expect(b.output).not.toContain('booking LH900')
}, 120000)

// Two apps, each in a schema of its own in one database, as @cap-js/postgres lays out tenants: their receipts are apart,
// and so are their keys. PostgreSQL's advisory locks are the database's, whatever the schema.
;(onPortableStore() ? test.skip : test)("a request whose key runs in another schema's app is not held up: each app answers its own", async () => {
  const database = newDatabaseName()
  await createDatabase(database)
  await withClient(client => client.query('CREATE SCHEMA app_one; CREATE SCHEMA app_two'), database)
  const inSchema = schema => {
    const db = dbConfig(database)
    return { ...db, credentials: { ...db.credentials, schema } }
  }
  const env = { ROLE: 'receiver', RELEASE_FILE: release }
  const [a] = await startInstances(inSchema('app_one'), [{ script: 'consumer-instance.js', name: 'one', env }])
  instances.push(a)
  const [b] = await startInstances(inSchema('app_two'), [{ script: 'consumer-instance.js', name: 'two', env }])
  instances.push(b)
  const first = book(a, 'k-schemas', 'LH901')
  await waitFor(() => a.output.includes('booking LH901'), { timeout: 30000, what: 'the booking running in app one' })
  let answeredAtOnce = false
  const other = book(b, 'k-schemas', 'LH902').finally(() => (answeredAtOnce = true))
  // app two's booking runs (or it is answered without running): then app one's may commit
  await waitFor(() => answeredAtOnce || b.output.includes('booking LH902'), { timeout: 30000, what: 'the booking of app two' })
  fs.writeFileSync(release, '')
  const [answered, otherAnswered] = await Promise.all([first, other])
  expect([answered.status, otherAnswered.status]).toEqual([200, 200])
  expect(b.output).toContain('booking LH902')
}, 120000)
