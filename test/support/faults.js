const fs = require('fs')
const os = require('os')
const path = require('path')
const { startInstance, stopInstance, enqueueFromAnotherProcess } = require('./instances')
const { waitFor, sleep } = require('./wait')

/**
 * Fault injection across processes: app instances (test/support/instance.js) killed with SIGKILL while they drain,
 * and the counts that prove nothing was lost or done twice. Every process is started and stopped by its PID.
 */

/** SQL both databases accept; `query(sql)` resolves to plain rows. */
const COUNTS = `SELECT
  (SELECT CAST(COUNT(*) AS INTEGER) FROM cds_outbox_Messages) AS "pending",
  (SELECT CAST(COUNT(*) AS INTEGER) FROM cds_outbox_Messages WHERE status = 'processing') AS "processing",
  (SELECT CAST(COUNT(*) AS INTEGER) FROM cds_outbox_Messages WHERE dueAt IS NULL) AS "dead",
  (SELECT CAST(COUNT(*) AS INTEGER) FROM test_Records WHERE kind = 'handled') AS "runs",
  (SELECT CAST(COUNT(DISTINCT message) AS INTEGER) FROM test_Records WHERE kind = 'handled') AS "handled"`

async function counts(query) {
  const [row] = await query(COUNTS)
  return Object.fromEntries(Object.entries(row).map(([k, v]) => [k, Number(v)]))
}

/** A new file the workers append message IDs to, outside their transactions (a remote call's trace). */
function sideEffectsFile() {
  return path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'event-queues-effects-')), 'effects.log')
}

/** How often each message ID appears in the side-effects file. */
function sideEffects(file) {
  const seen = new Map()
  if (!fs.existsSync(file)) return seen
  for (const ID of fs.readFileSync(file, 'utf8').split('\n').filter(Boolean)) seen.set(ID, (seen.get(ID) ?? 0) + 1)
  return seen
}

const between = (min, max) => min + Math.floor(Math.random() * (max - min))

/**
 * Keeps `workers` instances running and kills a random serving one with SIGKILL every `gap` ms (random within the
 * range) until `kills` kills are done, replacing each at once. Right after each kill it reads which messages the
 * killed process had claimed: the only ones allowed to run twice. Resolves with the kill records and the instances
 * still running (the caller stops them).
 */
async function killWhileDraining({ database, workers, kills, gap: [min, max], options, query }) {
  const serving = new Set()
  const booting = new Set()
  const records = []
  let started = 0
  const boot = () => {
    const name = `w${++started}`
    const starting = startInstance(database, { ...options, name }).then(child => {
      booting.delete(starting)
      serving.add(child)
      return child
    })
    booting.add(starting)
    return starting
  }
  for (let i = 0; i < workers; i++) await boot()
  while (records.length < kills) {
    await sleep(between(min, max))
    const victims = [...serving]
    if (victims.length === 0) continue
    const victim = victims[between(0, victims.length)]
    serving.delete(victim)
    const exited = new Promise(resolve => victim.once('exit', resolve))
    process.kill(victim.pid, 'SIGKILL')
    await exited
    const inFlight = await query(
      `SELECT ID AS "ID" FROM cds_outbox_Messages WHERE status = 'processing' AND claimedBy LIKE '%:${victim.pid}:%'`
    )
    records.push({ pid: victim.pid, inFlight: inFlight.map(r => r.ID) })
    void boot()
  }
  const late = await Promise.all([...booting])
  return { kills: records, running: [...new Set([...serving, ...late])] }
}

/** Waits until every message is handled and the queue table is empty; returns the final counts. */
function drained(query, messages, timeout = 120000) {
  return waitFor(
    async () => {
      const c = await counts(query)
      return c.pending === 0 && c.handled >= messages && c
    },
    { timeout, interval: 200, what: `${messages} handled messages and an empty queue` }
  )
}

const stopAll = children => Promise.all(children.map(child => stopInstance(child)))

/**
 * The kill -9 scenario on one database: `messages` committed by another process, drained by `workers` instances
 * that are killed `kills` times. Asserts exactly-once for the transactional effect, at-least-once for the side
 * effect with duplicates only for messages a killed process held, and an empty table; returns the figures.
 */
async function expectNothingLostUnderKills({ database, query, messages, workers, kills, gap, queue, handlerMs }) {
  const effects = sideEffectsFile()
  const options = { queue, env: { HANDLER_MS: String(handlerMs), SIDE_EFFECTS: effects } }
  await enqueueFromAnotherProcess(database, messages, {}, { deploy: true })
  const begin = Date.now()
  const result = await killWhileDraining({ database, workers, kills, gap, options, query })
  const lastKill = Date.now()
  try {
    const final = await drained(query, messages)
    const drainedAt = Date.now()
    // exactly once: one handled row per message, none twice; nothing left in processing, nothing dead
    expect(final).toEqual({ pending: 0, processing: 0, dead: 0, runs: messages, handled: messages })
    const seen = sideEffects(effects)
    const inFlight = new Set(result.kills.flatMap(k => k.inFlight))
    const duplicated = [...seen].filter(([, n]) => n > 1).map(([ID]) => ID)
    // at least once for every message; more than once only for messages a killed process held
    expect(seen.size).toBe(messages)
    expect(duplicated.filter(ID => !inFlight.has(ID))).toEqual([])
    return {
      kills: result.kills.length,
      inFlightAtKills: inFlight.size,
      duplicateSideEffects: duplicated.length,
      drainMs: drainedAt - begin,
      afterLastKillMs: drainedAt - lastKill
    }
  } finally {
    await stopAll(result.running)
  }
}

/**
 * A PostgreSQL server of the suite's own with one database, for suites that stop or restart their server (the other
 * suites' databases must not notice): started before the suite; after it, the app processes the suite put in
 * `running` are stopped, then the server. `server` and `db` (its `cds.requires.db`) are set once the suite started;
 * `query(sql)` resolves to rows.
 */
function privatePostgres() {
  const postgres = require('./postgres')
  const own = { server: undefined, db: undefined, running: [], database: postgres.newDatabaseName() }
  own.query = async sql => (await postgres.withClient(client => client.query(sql), own.database, own.server)).rows
  beforeAll(async () => {
    own.server = await postgres.startServer()
    await postgres.createDatabase(own.database, own.server)
    own.db = postgres.dbConfig(own.database, own.server)
  }, 60000)
  afterAll(async () => {
    await Promise.all(own.running.map(child => stopInstance(child)))
    if (own.server) await postgres.stopServer(own.server)
  })
  return own
}

module.exports = { privatePostgres, counts, sideEffectsFile, sideEffects, killWhileDraining, drained, stopAll, expectNothingLostUnderKills }
