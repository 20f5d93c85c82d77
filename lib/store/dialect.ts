import { createHash } from 'crypto'

/**
 * Where SQLite and PostgreSQL differ for the queue's statements. Everything else in the store is plain SQL that
 * both accept (unquoted identifiers, `?` placeholders translated here, ON CONFLICT, CASE, ||).
 */
export interface Dialect {
  readonly name: string
  /** The SQL as the driver wants it (placeholders). */
  prepare(sql: string): string
  /** Appended to the claim's row selection so concurrent claimers skip rows another one is claiming. */
  readonly skipLocked: string
  /**
   * A timestamp column read as ISO text. Drivers return timestamps differently: pg turns a TIMESTAMP (no zone)
   * into a Date in the process's local zone, which is wrong by the zone's offset unless TZ is UTC.
   */
  isoText(column: string): string
  /** How other processes learn of new messages at once; undefined where they can only poll. */
  readonly wakeUp?: WakeUp
  /**
   * Where concurrent claims can see different snapshots (PostgreSQL), the claim takes a transaction lock per ordering
   * key it claimed and then re-checks the key: `keyLock(column)` tries the lock (true if taken). Undefined where the
   * claim's UPDATE is atomic on its own (SQLite's single writer).
   */
  keyLock?(column: string): string
  /**
   * Runs one statement on a driver connection of CAP's database service (`tx.dbc`): the rows it reads, or the
   * number of rows it changed. `reads` says which of the two the caller wants.
   */
  execute(connection: unknown, sql: string, params: unknown[], reads: boolean): Promise<Result>
  /** A query of the names (column `name`) of the indexes on `table`, from the catalog: no lock on the table. */
  indexesOf(table: string): string
}

export interface Result {
  rows: Record<string, unknown>[]
  changes: number
}

/** A prepared statement of the SQLite drivers @cap-js/sqlite uses (better-sqlite3; its node:sqlite wrapper in v3). */
interface SqliteStatement {
  run(params: unknown[]): { changes: number | bigint }
  all(params: unknown[]): Record<string, unknown>[]
}

interface SqliteConnection {
  prepare(sql: string): SqliteStatement
}

/** Statements prepared once per SQLite connection: preparing costs more than running the queue's small statements. */
const prepared = new WeakMap<SqliteConnection, Map<string, SqliteStatement>>()
/** The store's statement texts are few, but IN lists vary in length: a bound keeps the cache from growing with them. */
const MAX_PREPARED = 256

function statementOn(connection: SqliteConnection, sql: string): SqliteStatement {
  let statements = prepared.get(connection)
  if (!statements) prepared.set(connection, (statements = new Map()))
  let statement = statements.get(sql)
  if (!statement) {
    if (statements.size >= MAX_PREPARED) statements.clear()
    statements.set(sql, (statement = connection.prepare(sql)))
  }
  return statement
}

interface PgClient {
  query(config: { name: string; text: string; values: unknown[] }): Promise<{ rows: Record<string, unknown>[]; rowCount: number | null }>
}

/**
 * Named statements are parsed and planned once per connection (the claim's plan is not cheap). The store's texts
 * come from a small set (IN lists up to the batch size, the queues skipped by a claim), so the names stay few.
 */
const statementNames = new Map<string, string>()
function statementName(sql: string): string {
  let name = statementNames.get(sql)
  if (!name) statementNames.set(sql, (name = 'cds_event_queues_' + createHash('sha1').update(sql).digest('hex')))
  return name
}

/** Cross-process wake-up: the enqueuing transaction signals, listeners on other connections receive it on commit. */
export interface WakeUp {
  /** Run in the enqueuing transaction; the database delivers it only if that transaction commits. */
  readonly signal: string
  /** Run once on a dedicated connection to receive the signals. */
  readonly listen: string
}

const sqlite: Dialect = {
  name: 'sqlite',
  prepare: sql => sql,
  // SQLite has one writer at a time: the claim's UPDATE is atomic without row locks.
  skipLocked: '',
  // Stored as ISO text by the store; no conversion. No wake-up: SQLite has no notifications between processes.
  isoText: column => column,
  indexesOf: table => `SELECT name AS "name" FROM sqlite_master WHERE type = 'index' AND tbl_name = '${table}'`,
  execute: async (connection, sql, params, reads) => {
    const statement = statementOn(connection as SqliteConnection, sql)
    if (reads) return { rows: statement.all(params), changes: 0 }
    return { rows: [], changes: Number(statement.run(params).changes) }
  }
}

/** The first key of the advisory locks on ordering keys (arbitrary, fixed). */
const KEY_LOCK_SPACE = 0x0e0e

/** The channel enqueuers notify and runners listen on. */
const WAKE_CHANNEL = 'cds_event_queues'

const postgres: Dialect = {
  name: 'postgres',
  prepare: sql => {
    let n = 0
    return sql.replace(/\?/g, () => `$${++n}`)
  },
  skipLocked: 'FOR UPDATE SKIP LOCKED',
  // Timestamps are written as UTC ISO strings into TIMESTAMP columns (zone dropped), so they read back as UTC.
  isoText: column => `to_char(${column}, 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`,
  // A constant payload: PostgreSQL folds identical notifications of one transaction into one.
  wakeUp: {
    signal: `SELECT pg_notify('${WAKE_CHANNEL}', '')`,
    listen: `LISTEN ${WAKE_CHANNEL}`
  },
  // The two-int form keeps these locks apart from an application's own single-bigint advisory locks. A hash
  // collision only makes a claim skip a key for a moment. Held until the claim commits, never while handlers run.
  keyLock: column => `pg_try_advisory_xact_lock(${KEY_LOCK_SPACE}, hashtext(${column}))`,
  // Unquoted identifiers are folded to lower case when created.
  indexesOf: table =>
    `SELECT indexname AS "name" FROM pg_indexes WHERE schemaname = current_schema() AND tablename = '${table.toLowerCase()}'`,
  execute: async (connection, sql, params) => {
    const { rows, rowCount } = await (connection as PgClient).query({ name: statementName(sql), text: sql, values: params })
    return { rows, changes: rowCount ?? 0 }
  }
}

export function dialectFor(kind: string | undefined): Dialect {
  return kind === 'postgres' ? postgres : sqlite
}
