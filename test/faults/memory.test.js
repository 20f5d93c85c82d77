const fs = require('fs')
const path = require('path')
const { newDatabaseFile, onPostgres } = require('../support/app')
const { runCli } = require('../support/cli')
const { counts, stopAll } = require('../support/faults')
const { environment, enqueueFromAnotherProcess, startInstance } = require('../support/instances')
const { OPERATOR_USERS } = require('../support/operators')
const { waitFor } = require('../support/wait')

/**
 * Memory stays bounded for any backlog of allowed messages: processes with the heap of a small container
 * (`--max-old-space-size=512`) beside a backlog of 400 messages of 1.5 MB each (600 MB, each well below
 * `maxMessageSize`) that others wrote — the runner draining it, and the operator's entry points (the operator
 * service over HTTP, the CLI beside the app) acting on it as dead letters.
 */
const HEAP = '--max-old-space-size=512'
const MESSAGES = 400
const PAYLOAD_BYTES = 1.5 * 1024 * 1024
/**
 * Writing and reading 600 MB takes minutes on a loaded machine (a minute or two without load): what is asserted is
 * that the processes survive, and a death fails the test at once (`whileAlive`), so the bound is generous.
 */
const LONG = 20 * 60 * 1000
const OPERATOR = { requires: { auth: { kind: 'mocked', users: OPERATOR_USERS } } }
const EVENT_QUEUES = '/odata/v4/event-queues'

describe('faults: memory with a backlog of large messages', () => {
  const running = []
  const closing = []

  afterEach(async () => {
    await stopAll(running.splice(0))
    for (const close of closing.splice(0)) await close()
  })

  /**
   * A new database of this project, with `query(sql)` (rows) and `run(sql)` (changes) from the test; removed after the
   * test (600 MB each).
   */
  async function newDatabase() {
    if (onPostgres()) {
      const { createDatabase, newDatabaseName, withClient } = require('../support/postgres')
      const name = newDatabaseName()
      await createDatabase(name)
      closing.push(() => withClient(client => client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)))
      const query = async sql => (await withClient(client => client.query(sql), name)).rows
      return { database: name, query, run: query }
    }
    const file = newDatabaseFile()
    const db = new (require('better-sqlite3'))(file)
    closing.push(() => {
      db.close()
      fs.rmSync(path.dirname(file), { recursive: true, force: true })
    })
    return { database: { kind: 'sqlite', credentials: { url: file } }, query: async sql => db.prepare(sql).all(), run: async sql => db.prepare(sql).run() }
  }

  /**
   * The backlog: another process commits one message through the plugin, on a database it deploys, and the database
   * copies its row (CAP's format, a new ID each) until there are `MESSAGES`: writing 600 MB through a client takes
   * minutes on a loaded machine, a copy inside the database seconds.
   */
  async function backlog({ database, run }) {
    await enqueueFromAnotherProcess(database, 1, { PAYLOAD_BYTES: String(PAYLOAD_BYTES) }, { deploy: true })
    const columns = 'timestamp, target, msg, attempts, appid, dueAt, orderingKey, service, event, interrupted'
    const copied = columns.split(', ').map(c => `m.${c}`).join(', ')
    await run(onPostgres()
      ? `INSERT INTO cds_outbox_Messages (ID, ${columns}) SELECT gen_random_uuid()::text, ${copied} FROM cds_outbox_Messages m CROSS JOIN generate_series(2, ${MESSAGES})`
      : `INSERT INTO cds_outbox_Messages (ID, ${columns}) WITH RECURSIVE n(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM n WHERE i < ${MESSAGES})
         SELECT lower(hex(randomblob(16))), ${copied} FROM cds_outbox_Messages m, n`)
  }

  /** The backlog as dead letters, every one failed `maxAttempts` (10) times, the app not yet started. */
  async function deadLetters(db) {
    await backlog(db)
    await db.run("UPDATE cds_outbox_Messages SET attempts = 10, dueAt = NULL, lastError = 'the remote system rejected it'")
  }

  async function deadCount(query) {
    const [{ dead }] = await query('SELECT CAST(COUNT(*) AS INTEGER) AS "dead" FROM cds_outbox_Messages WHERE attempts >= 10')
    return Number(dead)
  }

  /** Starts an app instance with the small heap; its output is kept for the report if it dies. */
  async function smallInstance(database, options = {}) {
    const child = await startInstance(database, { name: 'small-heap', execArgv: [HEAP], ...options })
    running.push(child)
    return child
  }

  /**
   * `promise`, or a failure with the instance's output as soon as `child` dies first. A request the dying instance
   * dropped fails with it ("other side closed"): then its death is the failure.
   */
  function whileAlive(child, promise, what) {
    const gone = () => child.exitCode !== null || child.signalCode !== null
    const death = () => new Error(`the instance died (exit code ${child.exitCode}, signal ${child.signalCode}) during ${what}:\n${child.output.slice(-3000)}`)
    const exited = new Promise(resolve => (gone() ? resolve() : child.once('exit', resolve)))
    const died = exited.then(() => Promise.reject(death()))
    const failed = e => Promise.race([exited, new Promise(resolve => setTimeout(resolve, 10000).unref())]).then(() => Promise.reject(gone() ? death() : e))
    return Promise.race([promise.catch(failed), died])
  }

  /** An HTTP request of the operator `ops` to the operator service of `child`; the status and the JSON answer. */
  async function asOperator(child, method, path, body) {
    const headers = { authorization: `Basic ${Buffer.from('ops:ops').toString('base64')}`, ...(body ? { 'content-type': 'application/json' } : {}) }
    const res = await fetch(`${child.url}${EVENT_QUEUES}${path}`, { method, headers, body: body && JSON.stringify(body) })
    return { status: res.status, data: await res.json() }
  }

  /** The CLI as an operator runs it beside the app, in a process with the small heap. */
  function cli(database, args) {
    const env = { ...environment(database, { name: 'cli' }), NODE_OPTIONS: HEAP }
    return runCli(args, { env, timeout: LONG - 120000 })
  }

  test(`an instance with a 512 MB heap drains ${MESSAGES} messages of 1.5 MB each and stays up`, async () => {
    const db = await newDatabase()
    await backlog(db)
    const { database, query } = db
    const child = await smallInstance(database)
    const drained = waitFor(async () => {
      const c = await counts(query)
      return c.pending === 0 && c.handled === MESSAGES && c
    }, { timeout: LONG - 120000, interval: 250, what: `${MESSAGES} handled messages and an empty queue` })
    const final = await whileAlive(child, drained, 'the drain')
    expect(final).toEqual({ pending: 0, processing: 0, dead: 0, runs: MESSAGES, handled: MESSAGES })
  }, LONG)

  test(`the operator service lists and deletes ${MESSAGES} dead letters of 1.5 MB (deleteAll) and its instance stays up`, async () => {
    const db = await newDatabase()
    await deadLetters(db)
    const child = await smallInstance(db.database, OPERATOR)

    const listed = await whileAlive(child, asOperator(child, 'GET', '/DeadOutboxMessages?$count=true'), 'a list of the dead letters')
    expect(listed.status).toBe(200)
    expect(listed.data['@odata.count']).toBe(MESSAGES)
    expect(listed.data.value.length).toBeGreaterThan(0)
    expect(listed.data.value[0].msg.length).toBeGreaterThan(PAYLOAD_BYTES)

    const deleted = await whileAlive(child, asOperator(child, 'POST', '/deleteAll', {}), 'deleteAll')
    expect(deleted).toMatchObject({ status: 200, data: { value: MESSAGES } })
    expect(await deadCount(db.query)).toBe(0)
  }, LONG)

  test(`the operator service revives ${MESSAGES} dead letters of 1.5 MB (reviveAll) and its instance stays up`, async () => {
    const db = await newDatabase()
    await deadLetters(db)
    const child = await smallInstance(db.database, OPERATOR)

    const revived = await whileAlive(child, asOperator(child, 'POST', '/reviveAll', { queue: 'queue' }), 'reviveAll')
    expect(revived).toMatchObject({ status: 200, data: { value: MESSAGES } })
    expect(await deadCount(db.query)).toBe(0)
    // the revived messages run at once (the first test shows they drain): the instance took some on
    await whileAlive(child, waitFor(async () => (await counts(db.query)).handled > 0, { timeout: LONG - 120000, interval: 250, what: 'the first revived message to run' }), 'the revival')
  }, LONG)

  test(`the CLI beside the app lists (dead --limit) and purges ${MESSAGES} dead letters of 1.5 MB in a 512 MB heap`, async () => {
    const db = await newDatabase()
    await deadLetters(db)
    const child = await smallInstance(db.database)

    const three = await cli(db.database, ['dead', '--limit', '3', '--json'])
    expect(three).toMatchObject({ code: 0, stderr: '' })
    const listed = JSON.parse(three.stdout)
    expect(listed).toHaveLength(3)
    expect(listed[0]).toMatchObject({ service: 'Target', event: 'record', attempts: 10, lastError: 'the remote system rejected it' })
    expect(listed[0].msg.length).toBeGreaterThan(PAYLOAD_BYTES)

    const table = await cli(db.database, ['dead'])
    expect(table.code).toBe(0)
    expect(table.stdout.trim().split('\n')).toHaveLength(MESSAGES + 1)

    const purged = await cli(db.database, ['purge', '--older-than', '1ms'])
    expect(purged).toMatchObject({ code: 0, stdout: `Deleted ${MESSAGES} dead letters.\n` })
    expect(await deadCount(db.query)).toBe(0)
    expect(child.exitCode).toBe(null)
  }, LONG)

  test(`the CLI beside the app revives ${MESSAGES} dead letters of 1.5 MB (revive --all) in a 512 MB heap`, async () => {
    const db = await newDatabase()
    await deadLetters(db)
    const child = await smallInstance(db.database)

    const revived = await cli(db.database, ['revive', '--all'])
    expect(revived).toMatchObject({ code: 0, stdout: `Revived ${MESSAGES} dead letters.\n` })
    expect(await deadCount(db.query)).toBe(0)
    expect(child.exitCode).toBe(null)
  }, LONG)
})
