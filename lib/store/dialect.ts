import type { Result } from '../cap/drivers'
import { afterBegin, transactionOfContext } from '../cap/transactions'

/**
 * Where the databases differ for the queue's statements. Everything else in the store is plain SQL that all accept
 * (unquoted identifiers, `?` placeholders translated here, ON CONFLICT, CASE, ||).
 */
export interface Dialect {
  /** The SQL as the driver wants it (placeholders). */
  prepare(sql: string): string
  /** Appended to the claim's row selection so concurrent claimers skip rows another one is claiming. */
  readonly skipLocked: string
  /**
   * The condition "ID is one of those `select` returns", for statements that change the rows a subquery chose. It
   * must find each chosen row by its key whatever the planner's statistics say: a queue table is mostly empty when
   * ANALYZE runs, and a plan for an empty table that reads the chosen IDs once per row of the table makes a claim
   * take seconds when a burst arrives.
   */
  idIn(select: string): string
  /**
   * A timestamp column read as ISO text. Drivers return timestamps differently: pg turns a TIMESTAMP (no zone)
   * into a Date in the process's local zone, which is wrong by the zone's offset unless TZ is UTC.
   */
  isoText(column: string): string
  /** The database's clock now, in UTC, to the millisecond (not the transaction's start); see lib/time/clock.ts. */
  readonly now: string
  /** `value` (a placeholder or a text literal) as a timestamp, where SQL cannot infer it (the branches of a CASE). */
  timestamp(value: string): string
  /** How other processes learn of new messages at once; undefined where they can only poll. */
  readonly wakeUp?: WakeUp
  /**
   * Where concurrent claims can see different snapshots (PostgreSQL), the claim takes a transaction lock per ordering
   * key it claimed and then re-checks the key: `keyLock(column)` tries the lock (true if taken). Undefined where the
   * claim's UPDATE is atomic on its own (SQLite's single writer).
   */
  keyLock?(column: string): string
  /**
   * A transaction lock on the name `name` (an expression) within the current schema, without waiting: true if taken
   * (see `QueueStore.tryLock`). Undefined where the database has no such locks (SQLite, whose single writer serialises).
   */
  nameLock?(name: string): string
  /**
   * Runs one statement on a driver connection of CAP's database service (`tx.dbc`): the rows it reads, or the
   * number of rows it changed. `reads` says which of the two the caller wants.
   */
  execute(connection: unknown, sql: string, params: unknown[], reads: boolean): Promise<Result>
  /** A query of the names (column `name`) of the indexes on `table`, from the catalog: no lock on the table. */
  indexesOf(table: string): string
  /** Lease renewals run on a connection of the runner's own (see SideConnection), not on a pooled one. */
  readonly renewsOutsideThePool: boolean
  /**
   * A statement that takes the database's write lock in a transaction that has not written yet, where one that read
   * first cannot write any more once another connection committed (SQLite in WAL mode: SQLITE_BUSY_SNAPSHOT); see
   * `lockWhenBegun`. Undefined where row locks serve (PostgreSQL).
   */
  readonly writeLock?: string
  /** The table an error of this database (its `code` and `message`) says does not exist, as it names it; or undefined. */
  missingTable(error: { code?: unknown; message: string }): string | undefined
}

/** Cross-process wake-up: the enqueuing transaction signals, listeners on other connections receive it on commit. */
export interface WakeUp {
  /** Run in the enqueuing transaction; the database delivers it only if that transaction commits. */
  readonly signal: string
  /** Run once on a dedicated connection to receive the signals. */
  readonly listen: string
  /** Run in a transaction that changed a queue's control row (a pause, a breaker): listeners read the rows again. */
  readonly controls: { signal: string; payload: string }
}

/**
 * The current transaction, a handler's that has not begun, takes `dialect`'s write lock as it begins, before its
 * first statement (where the dialect has one): a writer beside it (the CLI, another process on the SQLite file) then
 * waits for its commit, up to its busy timeout, instead of making the handler's first write fail after it read, which
 * would count an attempt and run the handler again.
 */
export function lockWhenBegun(dialect: Dialect | undefined): void {
  const lock = dialect?.writeLock
  const tx = lock ? transactionOfContext() : undefined
  if (lock && tx && !tx.ready) afterBegin(tx, async begun => void (await dialect!.execute(begun.dbc, lock, [], false)))
}
