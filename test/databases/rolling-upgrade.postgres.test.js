const { createDatabase, newDatabaseName, withClient } = require('../support/postgres')
const { startInstance, stopInstance } = require('../support/instances')
const { waitFor } = require('../support/wait')

/**
 * A rolling upgrade and its rollback: CAP's built-in queue and runner (test/support/cap-instance.js, the same model
 * without the plugin) and the plugin process one PostgreSQL table at the same time, each enqueueing too. Every message
 * is handled exactly once (its handler's write and the row's deletion commit together), and after the plugin is
 * gone — killed while it held messages — CAP's runner processes everything left.
 */
const CAP_VERSION = require('@sap/cds/package.json').version
const LOCKING = CAP_VERSION.startsWith('9.') ? [false, true] : [false] // legacyLocking: cds 10 has only the new way

describe.each(LOCKING)(`rolling upgrade beside CAP ${CAP_VERSION}'s own runner (legacyLocking: %s)`, legacyLocking => {
  const database = newDatabaseName()
  const query = (sql, params) => withClient(client => client.query(sql, params), database)
  let plugin, cap
  // One timeout for both, as one package.json gives both versions during an upgrade: with the plugin on its 1 h
  // default, its leases looked expired to CAP's runner (3 s) whenever a handler started late on a loaded machine, CAP
  // took the message over, and it ran twice (seen in CI on cds 10, postgres-portable).
  const TIMEOUT = '3s'

  const post = async (instance, path, body) => {
    const res = await fetch(`${instance.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body ?? {}) })
    if (!res.ok) throw new Error(`POST ${path} at ${instance.url} answered ${res.status}: ${await res.text()}`)
  }
  const counted = async () => (await query(`SELECT message, note FROM test_records WHERE kind = 'counted'`)).rows
  const left = async () => Number((await query('SELECT COUNT(*) AS n FROM cds_outbox_messages')).rows[0].n)

  /** CAP's runner only runs after its own commits and flush(): flush it until the table is empty. */
  const drainWithCap = () =>
    waitFor(async () => {
      await post(cap, '/flush')
      return (await left()) === 0
    }, { timeout: 60000, interval: 200, what: "CAP's runner to empty the table" })

  beforeAll(async () => {
    await createDatabase(database)
    plugin = await startInstance(database, { name: 'plugin', deploy: true, queue: { pollInterval: '200ms', timeout: TIMEOUT }, env: { COUNT_MS: '5' } })
    cap = await startInstance(database, { name: 'cap', script: 'cap-instance.js', queue: { kind: 'persistent-queue', legacyLocking, timeout: TIMEOUT }, env: { COUNT_MS: '50' } })
  }, 120000)

  afterAll(async () => {
    await stopInstance(plugin)
    await stopInstance(cap)
  })

  test('both runners at once: every message of either process is handled exactly once, and no row is stranded', async () => {
    const TOTAL = 400
    await Promise.all([
      post(plugin, '/enqueue', { from: 0, count: TOTAL / 4 }),
      post(cap, '/enqueue', { from: TOTAL / 4, count: TOTAL / 4 }),
      post(plugin, '/enqueue', { from: TOTAL / 2, count: TOTAL / 4 }),
      post(cap, '/enqueue', { from: (3 * TOTAL) / 4, count: TOTAL / 4 })
    ])
    await waitFor(async () => (await counted()).length >= TOTAL && (await left()) === 0 || (await post(cap, '/flush'), false), {
      timeout: 60000, interval: 200, what: `${TOTAL} messages handled and an empty table`
    })
    const rows = await counted()
    const perMessage = new Map()
    for (const { message } of rows) perMessage.set(message, (perMessage.get(message) ?? 0) + 1)
    expect(perMessage.size).toBe(TOTAL)
    expect([...perMessage.values()].every(n => n === 1)).toBe(true)
    const byInstance = rows.reduce((m, r) => ({ ...m, [r.note]: (m[r.note] ?? 0) + 1 }), {})
    console.log(`legacyLocking ${legacyLocking}: handled by ${JSON.stringify(byInstance)}`)
    expect(Object.keys(byInstance).sort()).toEqual(['cap', 'plugin'])
  }, 90000)

  test('rolling back: with the plugin killed while it held messages, CAP\'s runner processes everything it left', async () => {
    await query(`DELETE FROM test_records`)
    const TOTAL = 200
    const FROM = 1000
    // slow handlers, so the kill finds messages claimed (at enqueue and by claims) and others not yet taken
    await stopInstance(plugin)
    plugin = await startInstance(database, { name: 'plugin', queue: { pollInterval: '200ms', timeout: TIMEOUT }, env: { COUNT_MS: '200' } })
    await post(plugin, '/enqueue', { from: FROM, count: TOTAL })
    const processing = async () => Number((await query(`SELECT COUNT(*) AS n FROM cds_outbox_messages WHERE status = 'processing'`)).rows[0].n)
    await waitFor(async () => (await counted()).length > 0 && (await processing()) >= 10, { what: 'the plugin to handle some messages and hold others' })
    process.kill(plugin.pid, 'SIGKILL')
    await new Promise(resolve => plugin.once('exit', resolve))
    const held = await processing()
    expect(held).toBeGreaterThan(0)
    console.log(`legacyLocking ${legacyLocking}: ${held} messages left 'processing' by the killed plugin, ${await left()} in all`)
    await drainWithCap()
    const handled = new Set((await counted()).map(r => r.message))
    for (let n = FROM; n < FROM + TOTAL; n++) expect(handled.has(String(n))).toBe(true)
    const rows = await counted()
    expect(rows.length).toBe(TOTAL) // each handler's write committed with its row's deletion: none twice
  }, 120000)
})
