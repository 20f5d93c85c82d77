const { startApp } = require('../support/app')
const { runOneOff } = require('../support/instances')
const { waitFor } = require('../support/wait')
const { MESSAGES } = require('../support/outbox')
const cds = require('@sap/cds')

/**
 * Tasks that CAP's built-in queue registered before the app switched to the plugin. CAP gives a task a deterministic
 * ID, but not the same one in each major version: cds 9 (libx/queue/index.js `_createTask`, `_unschedule`) hashes
 * `<queue>||<task>`, cds 10 (libx/queue/utils.js `create_task`) `<service>:<task>`. An app that registers its tasks at
 * every boot must end up with one chain per task, whichever version wrote the row it finds.
 *
 * The installed version's row is written by CAP itself: test/support/cap-task.js runs CAP's own queue and runner
 * (test/cap-app, no plugin) on this suite's database. The other version's row is written with CQL exactly as that
 * version's source writes it (`capRow9`, `capRow10` below). The plugin app polls once an hour: it looks at CAP's rows
 * only when its own schedule commits, so every run below is one the test caused.
 */
const app = startApp({ requires: { queue: { pollInterval: '1h' } } })
const CAP_MAJOR = Number(require('@sap/cds/package.json').version.split('.')[0])

/** CAP's `deterministic_uuid` (libx/queue/utils.js, the same in cds 9 and 10). */
function capUuid(input) {
  const hash = require('crypto').createHash('sha256').update(input).digest()
  hash[6] = (hash[6] & 0x0f) | 0x40
  hash[8] = (hash[8] & 0x3f) | 0x80
  const hex = hash.toString('hex')
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`
}

/** CAP's timestamp: ISO with 100 ns digits (`_get100NanosecondTimestampISOString`), `offset` ms from now. */
function capTimestamp(offset) {
  const nanos = String(process.hrtime.bigint() % 1_000_000_000n).padStart(9, '0').substring(3, 7)
  return new Date(Date.now() + offset).toISOString().replace('Z', `${nanos}Z`)
}

/** The msg of a task as CAP writes it for `srv.schedule(task, data).every(every)` (a send, so `_fromSend`). */
const capMsg = (service, task, data, every) =>
  JSON.stringify({ 'cds.internal.user': 'privileged', service, context: { id: cds.utils.uuid() }, _fromSend: true, event: task, data, queue: { task, every } })

/** A task row as cds 9 writes it, due in a second: `ID` from queue and task name, `target` the queue. */
const capRow9 = ({ service = 'Target', queue = 'queue', task = 'tick', data = { by: 'CAP 9' }, every = 1000 } = {}) => ({
  ID: capUuid(`${queue}||${task}`), target: queue, timestamp: capTimestamp(every), msg: capMsg(service, task, data, every), task
})
/** A task row as cds 10 writes it, due in a second: `ID` from service and task name (it resets `status`). */
const capRow10 = ({ service = 'Target', queue = 'queue', task = 'tick', data = { by: 'CAP 10' }, every = 1000 } = {}) => ({
  ID: capUuid(`${service}:${task}`), target: queue, timestamp: capTimestamp(every), status: null, msg: capMsg(service, task, data, every), task
})
/** The row of the version that is not installed (the installed one writes its own in `registeredByCap`). */
const otherVersionRow = options => (CAP_MAJOR === 9 ? capRow10(options) : capRow9(options))

const taskRows = task => SELECT.from(MESSAGES).columns('ID', 'target', 'msg', 'task').where({ task }).orderBy('ID')
const payloads = rows => rows.map(r => [JSON.parse(r.msg).service, JSON.parse(r.msg).data.by]).sort()

/** CAP's built-in queue, without the plugin, registers `task` of Target every second and runs it once. */
async function registeredByCap(task, by = `CAP ${CAP_MAJOR}`) {
  const database = app.database ?? { kind: 'sqlite', credentials: { url: app.dbFile } }
  await runOneOff(database, 'schedule', { script: 'cap-task.js', env: { TASK: task, EVERY: '1s', DATA: JSON.stringify({ by }) } })
}

describe("tasks CAP's built-in queue registered (cds 9 and cds 10 IDs)", () => {
  let srv
  const runs = []
  const runsBy = by => runs.filter(r => r.by === by)

  beforeAll(async () => {
    srv = await cds.connect.to('Target')
    for (const event of ['tick', 'tock']) srv.on(event, req => void runs.push({ event, by: req.data.by }))
  })

  afterEach(async () => {
    await DELETE.from(MESSAGES)
    runs.length = 0
  })

  test('scheduling a task replaces the rows both CAP versions wrote for it: one chain recurs, and unschedule ends it', async () => {
    await registeredByCap('tick')
    await INSERT.into(MESSAGES).entries(otherVersionRow())
    expect(payloads(await taskRows('tick'))).toEqual([['Target', 'CAP 10'], ['Target', 'CAP 9']])
    // the row CAP wrote itself has the ID of its version's rule
    expect((await taskRows('tick')).map(r => r.ID).sort()).toEqual([capRow9().ID, capRow10().ID].sort())

    await srv.schedule('tick', { by: 'plugin' }).every('1s')
    expect(payloads(await taskRows('tick'))).toEqual([['Target', 'plugin']])
    await waitFor(() => runsBy('plugin').length >= 2, { what: "two runs of the plugin's task" })
    expect(runs.filter(r => r.event === 'tick' && r.by !== 'plugin')).toEqual([])
    expect(payloads(await taskRows('tick'))).toEqual([['Target', 'plugin']])

    expect(await srv.unschedule('tick')).toBe(1)
    expect(await taskRows('tick')).toEqual([])
  }, 60000)

  test("unschedule removes a task that only CAP's built-in queue registered, under either version's ID", async () => {
    await registeredByCap('tock')
    await INSERT.into(MESSAGES).entries(otherVersionRow({ task: 'tock' }))
    expect(await taskRows('tock')).toHaveLength(2)
    expect(await srv.unschedule('tock')).toBe(2)
    expect(await taskRows('tock')).toEqual([])
  }, 60000)

  test("a cds 9 ID names the queue, not the service: another service's task of that name on the same queue stays", async () => {
    // cds 9 gives Target's and Outboxed's task 'tick' on the queue 'queue' the same ID; this row is Outboxed's
    await INSERT.into(MESSAGES).entries(capRow9({ service: 'Outboxed', data: { by: 'Outboxed' } }))
    await srv.schedule('tick', { by: 'plugin' }).every('1h').after('1h')
    expect(payloads(await taskRows('tick'))).toEqual([['Outboxed', 'Outboxed'], ['Target', 'plugin']])
    expect(await srv.unschedule('tick')).toBe(1)
    expect(payloads(await taskRows('tick'))).toEqual([['Outboxed', 'Outboxed']])
  })

  test("a service on a named queue: cds 9's ID of its task names that queue", async () => {
    const named = await cds.connect.to('NamedQueue') // outboxed: 'slowQueue'
    await INSERT.into(MESSAGES).entries(capRow9({ service: 'NamedQueue', queue: 'slowQueue', data: { by: 'CAP 9' } }))
    await named.schedule('tick', { by: 'plugin' }).every('1h').after('1h')
    expect(payloads(await taskRows('tick'))).toEqual([['NamedQueue', 'plugin']])
    await INSERT.into(MESSAGES).entries(capRow9({ service: 'NamedQueue', queue: 'slowQueue', data: { by: 'CAP 9' } }))
    expect(await named.unschedule('tick')).toBe(2)
  })
})
