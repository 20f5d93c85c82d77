/**
 * The checker's reads of the database (beside the app): the queue table, the claims, and the app's own records.
 * The workload id of a row is read from the first characters of `msg`, where the app puts it (payloads can be MBs).
 */

const ROWS = `SELECT ID AS "ID", target AS "target", service AS "service", event AS "event", task AS "task", attempts AS "attempts",
  status AS "status", dueAt AS "dueAt", claimedBy AS "claimedBy", orderingKey AS "orderingKey", timestamp AS "timestamp",
  lastAttemptTimestamp AS "lastAttemptTimestamp", sequence AS "sequence", substr(msg, 1, 2000) AS "head" FROM cds_outbox_Messages`
/** The claims, and every keyed row with its state (I4 needs to know when a keyed message was still waiting). */
const CLAIMS = `SELECT ID AS "ID", status AS "status", claimedBy AS "claimedBy", dueAt AS "dueAt", target AS "target" FROM cds_outbox_Messages
  WHERE status = 'processing' OR orderingKey IS NOT NULL`
const RECORDS = {
  intents: 'SELECT wid AS "wid", service AS "service", orderingKey AS "orderingKey", messageID AS "messageID", timestamp AS "timestamp", pid AS "pid", at AS "at" FROM chaos_Intents',
  effects: 'SELECT wid AS "wid", messageID AS "messageID", attempt AS "attempt", pid AS "pid", at AS "at" FROM chaos_Effects',
  callbacks: 'SELECT wid AS "wid", kind AS "kind", pid AS "pid", at AS "at" FROM chaos_Callbacks',
  ticks: 'SELECT task AS "task", version AS "version", messageID AS "messageID", pid AS "pid", startedAt AS "startedAt", at AS "at" FROM chaos_Ticks'
}

/** A timestamp column's value as microseconds since the epoch (SQLite keeps CAP's 7 digits, PostgreSQL 6). */
function micros(value) {
  if (value == null) return null
  const m = String(value).match(/^(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(?:\.(\d+))?/)
  if (!m) return null
  const fraction = (m[3] ?? '').padEnd(6, '0').slice(0, 6)
  return Date.parse(`${m[1]}T${m[2]}Z`) * 1000 + Number(fraction)
}

const widOf = head => head?.match(/"wid":"([^"]+)"/)?.[1]

function rowOf(r, tenant) {
  const { head, ...row } = r
  return { ...row, tenant, attempts: Number(row.attempts), sequence: row.sequence == null ? null : Number(row.sequence), wid: widOf(head), timestamp: micros(row.timestamp), dueAt: micros(row.dueAt), lastAttemptTimestamp: micros(row.lastAttemptTimestamp) }
}

/** Every tenant's database that exists (a tenant unsubscribed is gone). */
const tenantsOf = database => database.tenants.filter(t => database.exists?.(t) ?? true)

async function rows(database) {
  const all = []
  for (const tenant of tenantsOf(database)) all.push(...(await database.query(ROWS, [], tenant)).map(r => rowOf(r, tenant)))
  return all
}

async function claims(database) {
  const all = []
  for (const tenant of tenantsOf(database)) all.push(...(await database.query(CLAIMS, [], tenant)).map(r => ({ ...r, tenant, dueAt: micros(r.dueAt) })))
  return all
}

async function records(database) {
  const all = { intents: [], effects: [], callbacks: [], ticks: [] }
  for (const tenant of tenantsOf(database)) {
    for (const [name, sql] of Object.entries(RECORDS)) {
      all[name].push(...(await database.query(sql, [], tenant)).map(r => ({ ...r, tenant, at: Number(r.at), pid: Number(r.pid) })))
    }
  }
  for (const intent of all.intents) intent.timestamp = micros(intent.timestamp)
  return all
}

/** Rows of queue `target` that were charged an attempt, with the start of their last error (a relay's outage, I16). */
async function charged(database, target) {
  const sql = `SELECT ID AS "ID", attempts AS "attempts", substr(lastError, 1, 300) AS "lastError", substr(msg, 1, 200) AS "head" FROM cds_outbox_Messages WHERE target = ? AND attempts > 0`
  const all = []
  for (const tenant of tenantsOf(database)) all.push(...(await database.query(sql, [target], tenant)).map(r => ({ ID: r.ID, attempts: Number(r.attempts), lastError: r.lastError, wid: widOf(r.head), tenant })))
  return all
}

/** The rows of `tenant` per queue (`target`): what its operators may be shown of it at most, now. */
async function countsOf(database, tenant) {
  if (!(database.exists?.(tenant) ?? true)) return {}
  const rows = await database.query('SELECT target AS "target", COUNT(*) AS "n" FROM cds_outbox_Messages GROUP BY target', [], tenant)
  return Object.fromEntries(rows.map(r => [r.target, Number(r.n)]))
}

/** The process ID in a claim (`host:pid:random`). */
const pidOfClaim = claimedBy => Number(claimedBy?.split(':')[1]) || undefined

module.exports = { rows, claims, charged, countsOf, records, pidOfClaim }
