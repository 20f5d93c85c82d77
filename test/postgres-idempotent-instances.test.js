const fs = require('fs')
const os = require('os')
const path = require('path')
const { onPortableStore } = require('./support/app')
const { startInstances, stopInstance } = require('./support/instances')
const { newDatabaseName, createDatabase } = require('./support/postgres')
const { waitFor } = require('./support/wait')

// @idempotent operations across instances on PostgreSQL (README, the consumer half): a request with a key another
// instance is still running gets 409 at once, not a second run; once the first committed, every instance answers
// from the record. Two processes of the test app on one database. Native store only: the portable store has no such
// lock (CQL has none), there the second request runs and gets 409 when it records the key (idempotent-operations).
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'event-queues-idempotent-'))
const release = path.join(dir, 'release')
let instances = []
afterAll(() => Promise.all(instances.map(child => stopInstance(child))))

const book = (instance, key) =>
  fetch(`${instance.url}/odata/v4/receiver/book`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'Idempotency-Key': `"${key}"` },
    body: JSON.stringify({ flight: 'LH900', seats: 1 })
  })

;(onPortableStore() ? test.skip : test)('a request whose key runs in another instance gets 409; after the commit both instances answer from the record', async () => {
  const database = newDatabaseName()
  await createDatabase(database)
  const env = { ROLE: 'receiver', RELEASE_FILE: release }
  instances = await startInstances(database, [{ script: 'consumer-instance.js', name: 'a', env }, { script: 'consumer-instance.js', name: 'b', env }])
  const [a, b] = instances
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
