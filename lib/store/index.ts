import cds from '@sap/cds'
import { dialectFor, type Dialect } from './dialect'
import type { MessageRow, NewMessage } from '../interfaces'

/**
 * Every statement the queue runs against `cds.outbox.Messages`. Statements run on the connection of the current
 * transaction (`cds.db` joins `cds.context`), so an enqueue is part of the caller's transaction and a completion is
 * part of the handler's.
 */

const TABLE = 'cds_outbox_Messages'
/** Quoted aliases: PostgreSQL folds unquoted names to lower case. */
function columns(dialect: Dialect): string {
  return 'ID as "ID", ' + dialect.isoText('timestamp') + ' as "timestamp", target as "target", msg as "msg", ' +
    'attempts as "attempts", lastError as "lastError", task as "task", appid as "appid", ' +
    dialect.isoText('claimedAt') + ' as "claimedAt"'
}

/**
 * The claim query filters and orders by due time; without this index it degrades with the table's size. Created by
 * the runner at start, not by `cds deploy`: CAP keeps the queue model out of `$sources` (no db/init.js beside it
 * runs) and executes generated DDL in no guaranteed order; starting covers every way a database gets deployed.
 */
const INDEXES = [`CREATE INDEX IF NOT EXISTS cds_outbox_Messages_due ON ${TABLE} (appid, dueAt)`]

/** Which rows this app owns: CAP's `appid` lets several apps share one table. */
function ownRows(appid: string | undefined): { sql: string; params: unknown[] } {
  return appid ? { sql: 'appid = ?', params: [appid] } : { sql: 'appid IS NULL', params: [] }
}

/** Epoch ms of a timestamp read through `Dialect.isoText` (ISO, or SQLite's 'YYYY-MM-DD HH:MM:SS' from a default). */
function millis(value: unknown): number {
  if (typeof value !== 'string') return NaN
  const iso = /[zZ]|[+-]\d\d:?\d\d$/.test(value) ? value : value.replace(' ', 'T') + 'Z'
  return Date.parse(iso)
}

function iso(date: Date | number): string {
  return new Date(date).toISOString()
}

const INSERT = `INSERT INTO ${TABLE} (ID, timestamp, target, msg, attempts, task, appid, dueAt) VALUES (?, ?, ?, ?, 0, ?, ?, ?)`

function insertParams(message: NewMessage, appid: string | null): unknown[] {
  return [message.ID, message.timestamp, message.target, message.msg, message.task ?? null, appid, iso(message.dueAt)]
}

/** Runs `fn` in a new transaction of its own (claims, outcomes), detached from any caller's transaction. */
export function inOwnTransaction<T>(fn: () => Promise<T>): Promise<T> {
  return cds.tx(fn) as unknown as Promise<T>
}

/** The claim a process holds on a row; outcomes are only written while it still holds it. */
export interface Claim {
  ID: string
  claimedBy: string
  claimedAt: number
}

interface RawRow extends Omit<MessageRow, 'timestamp' | 'claimedAt'> {
  timestamp: unknown
  claimedAt: unknown
}

export class Store {
  private readonly dialect: Dialect
  private readonly own: { sql: string; params: unknown[] }
  private readonly columns: string

  constructor(kind: string | undefined, appid: string | undefined) {
    this.dialect = dialectFor(kind)
    this.own = ownRows(appid)
    this.columns = columns(this.dialect)
  }

  /** The statement a dedicated connection runs to be told of new messages; undefined where only polling works. */
  get listenStatement(): string | undefined {
    return this.dialect.wakeUp?.listen
  }

  private async run(sql: string, params: unknown[]): Promise<unknown> {
    const db = cds.db as unknown as { run(sql: string, params: unknown[]): Promise<unknown> }
    return db.run(this.dialect.prepare(sql), params)
  }

  private async changes(sql: string, params: unknown[]): Promise<number> {
    const result = (await this.run(sql, params)) as { changes?: number } | number
    return typeof result === 'number' ? result : (result?.changes ?? 0)
  }

  async insert(message: NewMessage, appid: string | null): Promise<void> {
    await this.run(INSERT, insertParams(message, appid))
    await this.signalOthers()
  }

  /** Tells other processes' runners about a new due row, on commit of the current transaction (where supported). */
  private async signalOthers(): Promise<void> {
    const wakeUp = this.dialect.wakeUp
    if (wakeUp) await this.run(wakeUp.signal, [])
  }

  /**
   * Writes a scheduled task: a new row, or its existing row replaced (payload, timing, queue) with failure state and
   * claim reset, so re-scheduling also revives a dead letter. A run in progress finds out when it completes.
   */
  async upsertTask(message: NewMessage, appid: string | null): Promise<void> {
    await this.run(
      `${INSERT} ON CONFLICT (ID) DO UPDATE SET timestamp = excluded.timestamp, target = excluded.target,
         msg = excluded.msg, task = excluded.task, appid = excluded.appid, dueAt = excluded.dueAt, attempts = 0,
         lastError = NULL, status = NULL, claimedBy = NULL, claimedAt = NULL`,
      insertParams(message, appid)
    )
    await this.signalOthers()
  }

  /** Removes a scheduled task, whatever its state; the number of rows removed. */
  async unschedule(ID: string): Promise<number> {
    return this.changes(`DELETE FROM ${TABLE} WHERE ID = ?`, [ID])
  }

  /**
   * Claims up to `limit` due rows for `owner` until `leaseUntil`. A row whose previous lease expired counts that
   * lost attempt, so a message that kills its process every time still ends as a dead letter.
   */
  async claim(owner: string, now: number, leaseUntil: number, limit: number): Promise<MessageRow[]> {
    const claimedAt = iso(now)
    await this.run(
      `UPDATE ${TABLE} SET status = 'processing', claimedBy = ?, claimedAt = ?, dueAt = ?,
         attempts = attempts + CASE WHEN status = 'processing' THEN 1 ELSE 0 END,
         lastError = CASE WHEN status = 'processing'
           THEN 'Lease expired: ' || COALESCE(claimedBy, 'a process') || ' did not finish its attempt' ELSE lastError END,
         lastAttemptTimestamp = CASE WHEN status = 'processing' THEN claimedAt ELSE lastAttemptTimestamp END
       WHERE ID IN (SELECT ID FROM ${TABLE} WHERE ${this.own.sql} AND dueAt <= ?
         ORDER BY dueAt LIMIT ? ${this.dialect.skipLocked})`,
      [owner, claimedAt, iso(leaseUntil), ...this.own.params, claimedAt, limit]
    )
    const rows = (await this.run(
      `SELECT ${this.columns} FROM ${TABLE} WHERE claimedBy = ? AND claimedAt = ? ORDER BY timestamp`,
      [owner, claimedAt]
    )) as RawRow[]
    return rows.map(r => ({ ...r, attempts: Number(r.attempts ?? 0), timestamp: millis(r.timestamp), claimedAt: millis(r.claimedAt) }))
  }

  /** Deletes a processed row, in the handler's transaction; false if the claim was lost meanwhile. */
  async complete(claim: Claim): Promise<boolean> {
    const n = await this.changes(`DELETE FROM ${TABLE} WHERE ID = ? AND claimedBy = ? AND claimedAt = ?`, [
      claim.ID, claim.claimedBy, iso(claim.claimedAt)
    ])
    return n === 1
  }

  /**
   * Moves a completed occurrence of a recurring task to its next one, in the handler's transaction, so the
   * completion and the next occurrence commit together; false if the claim is gone.
   */
  async recur(claim: Claim, timestamp: string, dueAt: Date): Promise<boolean> {
    const n = await this.changes(
      `UPDATE ${TABLE} SET status = NULL, claimedBy = NULL, claimedAt = NULL, attempts = 0, lastError = NULL,
         timestamp = ?, dueAt = ? WHERE ID = ? AND claimedBy = ? AND claimedAt = ?`,
      [timestamp, iso(dueAt), claim.ID, claim.claimedBy, iso(claim.claimedAt)]
    )
    return n === 1
  }

  /**
   * Whether a task row still holds the occurrence that was claimed with this `timestamp`. Re-scheduling and
   * recurring write a new timestamp and unscheduling deletes the row; a takeover after an expired lease changes neither.
   */
  async holdsOccurrence(ID: string, timestamp: number): Promise<boolean> {
    const rows = (await this.run(`SELECT ${this.dialect.isoText('timestamp')} AS "timestamp" FROM ${TABLE} WHERE ID = ?`, [
      ID
    ])) as { timestamp: unknown }[]
    return rows.length > 0 && millis(rows[0].timestamp) === timestamp
  }

  /** Records a failed attempt: due again at `dueAt`, or a dead letter when `dueAt` is null. */
  async fail(claim: Claim, attempts: number, lastError: string | null, dueAt: Date | null, now: number): Promise<boolean> {
    const n = await this.changes(
      `UPDATE ${TABLE} SET status = NULL, claimedBy = NULL, claimedAt = NULL, attempts = ?, lastError = ?,
         lastAttemptTimestamp = ?, dueAt = ? WHERE ID = ? AND claimedBy = ? AND claimedAt = ?`,
      [attempts, lastError, iso(now), dueAt && iso(dueAt), claim.ID, claim.claimedBy, iso(claim.claimedAt)]
    )
    return n === 1
  }

  /** Hands a claimed row back unprocessed, due at `dueAt`. */
  async release(claim: Claim, dueAt: Date): Promise<boolean> {
    const n = await this.changes(
      `UPDATE ${TABLE} SET status = NULL, claimedBy = NULL, claimedAt = NULL, dueAt = ?
       WHERE ID = ? AND claimedBy = ? AND claimedAt = ?`,
      [iso(dueAt), claim.ID, claim.claimedBy, iso(claim.claimedAt)]
    )
    return n === 1
  }

  /** Moves the lease of a claim to `until`. */
  async renew(claim: Claim, until: number): Promise<boolean> {
    const n = await this.changes(`UPDATE ${TABLE} SET dueAt = ? WHERE ID = ? AND claimedBy = ? AND claimedAt = ?`, [
      iso(until), claim.ID, claim.claimedBy, iso(claim.claimedAt)
    ])
    return n === 1
  }

  /** When the next row becomes due (or a lease expires); undefined if nothing is pending. */
  async nextDue(): Promise<number | undefined> {
    const rows = (await this.run(
      `SELECT ${this.dialect.isoText('MIN(dueAt)')} AS "next" FROM ${TABLE} WHERE ${this.own.sql} AND dueAt IS NOT NULL`,
      this.own.params
    )) as { next: unknown }[]
    const next = millis(rows[0]?.next)
    return Number.isNaN(next) ? undefined : next
  }

  /** Creates the indexes the claim needs if they are missing (idempotent; see `INDEXES`). */
  async ensureIndexes(): Promise<void> {
    for (const ddl of INDEXES) await this.run(ddl, [])
  }
}
