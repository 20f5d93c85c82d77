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
  isoText: column => column
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
  keyLock: column => `pg_try_advisory_xact_lock(${KEY_LOCK_SPACE}, hashtext(${column}))`
}

export function dialectFor(kind: string | undefined): Dialect {
  return kind === 'postgres' ? postgres : sqlite
}
