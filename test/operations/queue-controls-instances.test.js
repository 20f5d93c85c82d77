const { startInstance, startInstances, stopInstance } = require('../support/instances')
const { sharedDatabase, query } = require('../support/shared-database')
const { OPERATOR_USERS } = require('../support/operators')
const { waitFor } = require('../support/wait')

/**
 * A pause holds across instances and restarts: three app processes on one database (a SQLite file, or PostgreSQL;
 * the native and the portable store); the queue is paused through one instance's operator service, the others learn
 * of it (at once on PostgreSQL, at their next poll elsewhere), a restarted one knows it from the table, and a resume
 * through another instance lets every one run the messages again.
 */
const ops = 'Basic ' + Buffer.from(`ops:${OPERATOR_USERS.ops.password}`).toString('base64')

const post = (instance, path, body, headers = {}) =>
  fetch(`${instance.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) }).then(async res => {
    if (!res.ok) throw new Error(`POST ${path} on instance ${instance.pid}: ${res.status} ${await res.text()}`)
    return res.status === 204 ? undefined : res.json()
  })
const operator = (instance, action, queue) => post(instance, `/odata/v4/event-queues/${action}`, { queue }, { authorization: ops })

const HANDLED = 'SELECT COUNT(*) AS "count" FROM test_Records WHERE kind = \'counted\''
const WAITING = 'SELECT attempts AS "attempts", status AS "status" FROM cds_outbox_Messages'
const count = async database => Number((await query(database, HANDLED))[0].count)

describe('pause and resume across instances', () => {
  let database
  const running = []
  const options = name => ({
    name,
    queue: { pollInterval: '500ms' },
    requires: { auth: { kind: 'mocked', users: OPERATOR_USERS } },
    // the queue's log at info: each instance says when it learns of a pause, and who made it
    env: { CDS_LOG_LEVELS_QUEUE: 'info' }
  })
  /** Resolves once `instance` has logged `pattern` after `from` (an index into its output). */
  const learned = (instance, pattern, from = 0) => waitFor(() => pattern.test(instance.output.slice(from)), { timeout: 30000, what: `instance ${instance.pid} to log ${pattern}` })

  beforeAll(async () => {
    database = await sharedDatabase()
    running.push(...(await startInstances(database, ['A', 'B', 'C'].map(options))))
  }, 120000)
  afterAll(() => Promise.all(running.map(child => stopInstance(child))))

  test('paused through one instance, a queue waits in all of them and after a restart; resumed through another, all run it', async () => {
    const [A, B, C] = running
    expect(await operator(A, 'pause', 'queue')).toMatchObject({ queue: 'queue', paused: true, pausedBy: 'ops' })
    await learned(A, /queue queue paused by ops: its messages stay in the table until it is resumed/)
    await Promise.all([B, C].map(instance => learned(instance, /queue queue is paused \(by ops at /)))

    await post(B, '/enqueue', { from: 0, count: 6 })
    await Promise.all(running.map(instance => post(instance, '/flush', {})))
    expect(await count(database)).toBe(0)
    const waiting = await query(database, WAITING)
    expect(waiting).toHaveLength(6)
    expect(waiting.every(r => Number(r.attempts) === 0 && r.status === null)).toBe(true)

    // a restarted instance knows it from the table
    await stopInstance(C)
    const restarted = await startInstance(database, options('C2'))
    running[2] = restarted
    await learned(restarted, /queue queue is paused \(by ops at /)
    await post(restarted, '/flush', {})
    expect(await count(database)).toBe(0)

    const from = A.output.length
    expect(await operator(restarted, 'resume', 'queue')).toMatchObject({ queue: 'queue', paused: false })
    await learned(A, /queue queue was resumed/, from)
    await waitFor(async () => (await count(database)) === 6 && (await query(database, WAITING)).length === 0, { timeout: 60000, what: 'the 6 messages to run after the resume' })
  }, 240000)
})
