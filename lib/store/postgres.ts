import { executeOnPostgres } from '../cap/drivers'
import type { Dialect } from './dialect'

/** The first key of the advisory locks on ordering keys (arbitrary, fixed). */
const KEY_LOCK_SPACE = 0x0e0e

/** The channel enqueuers notify and runners listen on. */
const WAKE_CHANNEL = 'cds_event_queues'
/** The payload of a notification that a queue's control row changed (see controls/queue-controls.ts). */
const CONTROLS_PAYLOAD = 'controls'

export const postgres: Dialect = {
  prepare: sql => {
    let n = 0
    return sql.replace(/\?/g, () => `$${++n}`)
  },
  skipLocked: 'FOR UPDATE SKIP LOCKED',
  // An array subquery runs once, before the statement (an InitPlan), and `= ANY` of it is an index condition on the
  // primary key: no join order for the planner to choose. `IN (subquery)` is a semi-join, and with the statistics of
  // an empty table the planner put the table outside: 0.7 s per claim of 500 rows among 3,000 (postgres-claiming).
  idIn: select => `ID = ANY(ARRAY(${select}))`,
  // Timestamps are written as UTC ISO strings into TIMESTAMP columns (zone dropped), so they read back as UTC.
  isoText: column => `to_char(${column}, 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`,
  // now() is the transaction's start; the columns hold UTC without a zone
  now: "(clock_timestamp() AT TIME ZONE 'UTC')",
  // A parameter as the value of a CASE has no type (text at best), which a TIMESTAMP column does not take.
  timestamp: value => `CAST(${value} AS TIMESTAMP)`,
  // A constant payload: PostgreSQL folds identical notifications of one transaction into one.
  wakeUp: {
    signal: `SELECT pg_notify('${WAKE_CHANNEL}', '')`,
    listen: `LISTEN ${WAKE_CHANNEL}`,
    controls: { signal: `SELECT pg_notify('${WAKE_CHANNEL}', '${CONTROLS_PAYLOAD}')`, payload: CONTROLS_PAYLOAD }
  },
  // The two-int form keeps these locks apart from an application's own single-bigint advisory locks. A hash
  // collision only makes a claim skip a key for a moment. Held until the claim commits, never while handlers run.
  keyLock: column => `pg_try_advisory_xact_lock(${KEY_LOCK_SPACE}, hashtext(${column}))`,
  // An advisory lock is the database's, whatever the schema: a name is locked within the current schema, where what it
  // guards is (apps, or tenants, in schemas of one database), so another schema's same name does not wait for it.
  nameLock: name => `pg_try_advisory_xact_lock(${KEY_LOCK_SPACE}, hashtext(current_schema() || '.' || ${name}))`,
  // Unquoted identifiers are folded to lower case when created.
  indexesOf: table =>
    `SELECT indexname AS "name" FROM pg_indexes WHERE schemaname = current_schema() AND tablename = '${table.toLowerCase()}'`,
  renewsOutsideThePool: true,
  execute: (connection, sql, params) => executeOnPostgres(connection, sql, params),
  // undefined_table; the name as folded to lower case, maybe with its schema
  missingTable: ({ code, message }) => (code === '42P01' ? /relation "(?:[^"]+\.)?([^".]+)" does not exist/.exec(message)?.[1] : undefined)
}
