import cds from '@sap/cds'
import { dialectFor, type Dialect, type Result } from './dialect'
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
const INDEXES: [name: string, definition: string][] = [
  ['cds_outbox_Messages_due', '(appid, dueAt)'],
  // PostgreSQL does not take `appid IS NULL` as an equality for the order of the index above: without this one,
  // every claim of an app without appid sorts the whole backlog (5 ms per claim at 10,000 rows instead of 0.1 ms).
  ['cds_outbox_Messages_due_noapp', '(dueAt) WHERE appid IS NULL'],
  // The claim reads its rows back by (claimedBy, claimedAt). Partial: only rows under a claim are in it.
  ['cds_outbox_Messages_claim', '(claimedBy, claimedAt) WHERE claimedBy IS NOT NULL'],
  // The claim's ordering-key checks. Partial: unordered rows are not in them, so they cost unordered messages nothing.
  ['cds_outbox_Messages_key', '(orderingKey, timestamp) WHERE orderingKey IS NOT NULL'],
  ['cds_outbox_Messages_key_claimed', "(orderingKey) WHERE orderingKey IS NOT NULL AND status = 'processing'"]
]

/** A piece of SQL with its parameters. */
interface Fragment {
  sql: string
  params: unknown[]
}

/**
 * Rows `IDs` while the claim of `claimedBy` at `claimedAt` (ISO) still holds them. The rows of one claim share owner
 * and time, so this guards one row's outcome as well as a whole slot's.
 */
function heldBy(claimedBy: string, claimedAt: string, IDs: string[]): Fragment {
  return { sql: `claimedBy = ? AND claimedAt = ? AND ID IN (${IDs.map(() => '?').join(', ')})`, params: [claimedBy, claimedAt, ...IDs] }
}

/** `heldBy` for claims of one claim statement (a slot's): same owner and time. */
function heldByAll(claims: Claim[]): Fragment {
  const { claimedBy, claimedAt } = claims[0]
  return heldBy(claimedBy, iso(claimedAt), claims.map(c => c.ID))
}

/** Which rows this app owns: CAP's `appid` lets several apps share one table. */
function ownRows(appid: string | undefined, alias = ''): Fragment {
  return appid ? { sql: `${alias}appid = ?`, params: [appid] } : { sql: `${alias}appid IS NULL`, params: [] }
}

/** Another row of row `r`'s ordering key, running under a lease that is still valid at `now`. */
function runningOfKey(ownE: Fragment, now: string): Fragment {
  return {
    sql: `SELECT 1 FROM ${TABLE} e WHERE e.orderingKey = r.orderingKey AND ${ownE.sql}
      AND e.status = 'processing' AND e.dueAt > ? AND e.ID <> r.ID`,
    params: [...ownE.params, now]
  }
}

/**
 * Whether row `r` may be claimed as far as its ordering key goes: it is unordered, or it is the first of its key (by
 * timestamp, then ID) and no other row of its key runs under a live lease. The second condition covers a row with an
 * earlier timestamp that commits after a later one of its key was claimed: it waits until that one has finished.
 */
function keyIsFree(ownE: Fragment, now: string): Fragment {
  const running = runningOfKey(ownE, now)
  return {
    sql: `(r.orderingKey IS NULL OR (
      NOT EXISTS (SELECT 1 FROM ${TABLE} e WHERE e.orderingKey = r.orderingKey AND ${ownE.sql}
        AND (e.timestamp < r.timestamp OR (e.timestamp = r.timestamp AND e.ID < r.ID)))
      AND NOT EXISTS (${running.sql})))`,
    params: [...ownE.params, ...running.params]
  }
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

const INSERT_COLUMNS = 'ID, timestamp, target, msg, attempts, task, appid, dueAt, orderingKey'
const INSERT_VALUES = '?, ?, ?, ?, 0, ?, ?, ?, ?'
const INSERT = `INSERT INTO ${TABLE} (${INSERT_COLUMNS}) VALUES (${INSERT_VALUES})`
/** A new row already claimed (see `Store.insertClaimed`). */
const INSERT_CLAIMED = `INSERT INTO ${TABLE} (${INSERT_COLUMNS}, status, claimedBy, claimedAt)
  VALUES (${INSERT_VALUES}, 'processing', ?, ?)`

function insertParams(message: NewMessage, appid: string | null): unknown[] {
  const { ID, timestamp, target, msg, task, dueAt, orderingKey } = message
  return [ID, timestamp, target, msg, task ?? null, appid, iso(dueAt), orderingKey ?? null]
}

/** CAP's database transaction as @cap-js/db-service implements it: the parts the store relies on. */
export interface DatabaseTransaction {
  /** Falsy until begun, then the promise of the begin; 'committed' or 'rolled back' once ended. */
  ready?: Promise<unknown> | string | boolean
  /** The driver connection, from begin until the transaction ends. */
  dbc?: unknown
  begin(): Promise<unknown>
  dispatch(req: unknown): Promise<unknown>
  /** Set on a shared transaction as one message sees it (see `Store.savepointed`): runs before its first statement. */
  [$beforeStatement]?: () => Promise<void>
}

const $beforeStatement = Symbol('before the first statement of a message in a shared transaction')

/** One message's part of a transaction several messages share (see `Store.savepointed`). */
export interface Savepointed {
  /** The shared transaction as this message's handlers see it. */
  tx: DatabaseTransaction
  /** Undoes this message's statements, if it ran any. */
  rollback(): Promise<void>
  /** Keeps them, as part of the shared transaction. */
  release(): Promise<void>
}

/**
 * The driver connection of the current transaction, begun the way CAP begins one on its first statement (session
 * variables, BEGIN), so CAP statements of the same transaction join it. Statements on it are part of the caller's
 * transaction; running them there skips CAP's per-statement query processing, which costs more than the queue's
 * small statements themselves. Undefined outside a transaction or once it ended: CAP then runs the statement.
 */
async function currentConnection(): Promise<unknown> {
  const tx = transactionOfContext()
  if (!tx) return undefined
  const beforeStatement = tx[$beforeStatement]
  await (beforeStatement ? beforeStatement() : begun(tx))
  return tx.dbc
}

/** The database transaction of the current context, begun or not; undefined outside one or once it ended. */
function transactionOfContext(): DatabaseTransaction | undefined {
  const ctx = cds.context as { tx?: { _done?: string } } | undefined
  if (!ctx?.tx || ctx.tx._done) return undefined
  const tx = (cds.db as unknown as { tx(ctx: object): DatabaseTransaction }).tx(ctx)
  return typeof tx.ready === 'string' ? undefined : tx
}

async function begun(tx: DatabaseTransaction): Promise<void> {
  tx.ready ||= tx.begin().then(() => true)
  await tx.ready
}

function cdsRun(sql: string, params: unknown[]): Promise<unknown> {
  return (cds.db as unknown as { run(sql: string, params: unknown[]): Promise<unknown> }).run(sql, params)
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
  orderingKey: string | null
  keyLocked?: unknown
}

export class Store {
  private readonly dialect: Dialect
  private readonly own: Fragment
  /** `own` for the rows `e` of the ordering-key checks. */
  private readonly ownE: Fragment
  private readonly columns: string
  /** Transactions that already signal other processes on commit (see `signalOthers`). */
  private readonly signalled = new WeakSet<object>()

  constructor(kind: string | undefined, appid: string | undefined) {
    this.dialect = dialectFor(kind)
    this.own = ownRows(appid)
    this.ownE = ownRows(appid, 'e.')
    this.columns = columns(this.dialect)
  }

  /** The statement a dedicated connection runs to be told of new messages; undefined where only polling works. */
  get listenStatement(): string | undefined {
    return this.dialect.wakeUp?.listen
  }

  /** The rows a statement reads. */
  private async rows<T>(sql: string, params: unknown[]): Promise<T[]> {
    return (await this.execute(sql, params, true)).rows as T[]
  }

  /** The number of rows a statement changed. */
  private async changes(sql: string, params: unknown[]): Promise<number> {
    return (await this.execute(sql, params, false)).changes
  }

  /** Runs a statement in the current transaction, on its own connection (see `currentConnection`), else through CAP. */
  private async execute(sql: string, params: unknown[], reads: boolean): Promise<Result> {
    const prepared = this.dialect.prepare(sql)
    const connection = await currentConnection()
    if (connection) return this.dialect.execute(connection, prepared, params, reads)
    const result = (await cdsRun(prepared, params)) as Result['rows'] | { changes?: number } | number
    if (reads) return { rows: result as Result['rows'], changes: 0 }
    return { rows: [], changes: typeof result === 'number' ? result : ((result as { changes?: number })?.changes ?? 0) }
  }

  async insert(message: NewMessage, appid: string | null): Promise<void> {
    await this.changes(INSERT, insertParams(message, appid))
    await this.signalOthers()
  }

  /**
   * Writes a new message already claimed by `claim` until `leaseUntil`, for the enqueuing process to run right after
   * the commit. No other process needs to hear of it; if this one dies first, the lease expires and any takes it.
   */
  async insertClaimed(message: NewMessage, appid: string | null, claim: Claim, leaseUntil: number): Promise<void> {
    await this.changes(INSERT_CLAIMED, [...insertParams({ ...message, dueAt: new Date(leaseUntil) }, appid), claim.claimedBy, iso(claim.claimedAt)])
  }

  /**
   * Tells other processes' runners about a new due row, on commit of the current transaction (where supported). Once
   * per transaction: the database delivers one notification per commit anyway, so a transaction enqueuing 100
   * messages saves 99 round trips. A transaction object is never reused after it ends, so it identifies the commit.
   */
  private async signalOthers(): Promise<void> {
    const wakeUp = this.dialect.wakeUp
    if (!wakeUp) return
    const tx = (cds.context as { tx?: object } | undefined)?.tx
    if (tx && this.signalled.has(tx)) return
    await this.rows(wakeUp.signal, [])
    if (tx) this.signalled.add(tx)
  }

  /**
   * Writes a scheduled task: a new row, or its existing row replaced (payload, timing, queue) with failure state and
   * claim reset, so re-scheduling also revives a dead letter. A run in progress finds out when it completes.
   */
  async upsertTask(message: NewMessage, appid: string | null): Promise<void> {
    await this.changes(
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
   * Claims up to `limit` due rows for `owner` until `leaseUntil`, skipping the queues in `skipTargets` (full in this
   * process) and rows whose ordering key is busy (`keyIsFree`). A row whose previous lease expired counts that lost
   * attempt, so a message that kills its process every time still ends as a dead letter.
   */
  async claim(owner: string, now: number, leaseUntil: number, limit: number, skipTargets: string[] = []): Promise<MessageRow[]> {
    const claimedAt = iso(now)
    const free = keyIsFree(this.ownE, claimedAt)
    const skip = skipTargets.length ? `AND r.target NOT IN (${skipTargets.map(() => '?').join(', ')})` : ''
    await this.changes(
      `UPDATE ${TABLE} SET status = 'processing', claimedBy = ?, claimedAt = ?, dueAt = ?,
         attempts = attempts + CASE WHEN status = 'processing' THEN 1 ELSE 0 END,
         lastError = CASE WHEN status = 'processing'
           THEN 'Lease expired: ' || COALESCE(claimedBy, 'a process') || ' did not finish its attempt' ELSE lastError END,
         lastAttemptTimestamp = CASE WHEN status = 'processing' THEN claimedAt ELSE lastAttemptTimestamp END
       WHERE ID IN (SELECT r.ID FROM ${TABLE} r WHERE ${this.own.sql} AND r.dueAt <= ? ${skip} AND ${free.sql}
         ORDER BY r.dueAt LIMIT ? ${this.dialect.skipLocked})`,
      [owner, claimedAt, iso(leaseUntil), ...this.own.params, claimedAt, ...skipTargets, ...free.params, limit]
    )
    const keyLock = this.dialect.keyLock
    const rows = await this.rows<RawRow>(
      `SELECT ${this.columns}, orderingKey AS "orderingKey"${keyLock ? `, ${keyLock('orderingKey')} AS "keyLocked"` : ''}
       FROM ${TABLE} WHERE claimedBy = ? AND claimedAt = ? ORDER BY timestamp`,
      [owner, claimedAt]
    )
    const handedBack = keyLock ? await this.keysTakenMeanwhile(rows, owner, claimedAt) : new Set<string>()
    return rows
      .filter(r => !handedBack.has(r.ID))
      .map(({ orderingKey, keyLocked, ...r }) => ({
        ...r, attempts: Number(r.attempts ?? 0), timestamp: millis(r.timestamp), claimedAt: millis(r.claimedAt)
      }))
  }

  /**
   * PostgreSQL: two claims that started from different snapshots may each see a different row of one key as free.
   * Each claim holds the key's lock from its read-back to its commit, and checks the key again after taking it (a
   * new statement sees every claim that committed before): a row whose key is locked by a claim in progress, or now
   * runs elsewhere, is handed back at once. Unordered claims skip this.
   */
  private async keysTakenMeanwhile(rows: RawRow[], owner: string, claimedAt: string): Promise<Set<string>> {
    const keyed = rows.filter(r => r.orderingKey !== null && r.orderingKey !== undefined)
    if (keyed.length === 0) return new Set()
    const running = runningOfKey(this.ownE, claimedAt)
    const taken = (await this.rows(
      `SELECT r.ID AS "ID" FROM ${TABLE} r WHERE r.claimedBy = ? AND r.claimedAt = ? AND r.orderingKey IS NOT NULL
         AND EXISTS (${running.sql})`,
      [owner, claimedAt, ...running.params]
    )) as { ID: string }[]
    const handBack = new Set([...keyed.filter(r => !r.keyLocked).map(r => r.ID), ...taken.map(r => r.ID)])
    if (handBack.size === 0) return handBack
    const held = heldBy(owner, claimedAt, [...handBack])
    await this.changes(`UPDATE ${TABLE} SET status = NULL, claimedBy = NULL, claimedAt = NULL, dueAt = ? WHERE ${held.sql}`, [claimedAt, ...held.params])
    return handBack
  }

  /** Runs an UPDATE or DELETE of one row only while `claim` still holds it; false if it no longer does. */
  private async whileClaimed(statement: string, params: unknown[], claim: Claim): Promise<boolean> {
    const held = heldByAll([claim])
    return (await this.changes(`${statement} WHERE ${held.sql}`, [...params, ...held.params])) === 1
  }

  /** Deletes a processed row, in the handler's transaction; false if the claim was lost meanwhile. */
  async complete(claim: Claim): Promise<boolean> {
    return this.whileClaimed(`DELETE FROM ${TABLE}`, [], claim)
  }

  /**
   * Moves a completed occurrence of a recurring task to its next one, in the handler's transaction, so the
   * completion and the next occurrence commit together; false if the claim is gone.
   */
  async recur(claim: Claim, timestamp: string, dueAt: Date): Promise<boolean> {
    return this.whileClaimed(
      `UPDATE ${TABLE} SET status = NULL, claimedBy = NULL, claimedAt = NULL, attempts = 0, lastError = NULL,
         timestamp = ?, dueAt = ?`,
      [timestamp, iso(dueAt)],
      claim
    )
  }

  /**
   * Whether a task row still holds the occurrence that was claimed with this `timestamp`. Re-scheduling and
   * recurring write a new timestamp and unscheduling deletes the row; a takeover after an expired lease changes neither.
   */
  async holdsOccurrence(ID: string, timestamp: number): Promise<boolean> {
    const rows = (await this.rows(`SELECT ${this.dialect.isoText('timestamp')} AS "timestamp" FROM ${TABLE} WHERE ID = ?`, [
      ID
    ])) as { timestamp: unknown }[]
    return rows.length > 0 && millis(rows[0].timestamp) === timestamp
  }

  /**
   * Records a failed attempt: due again at `dueAt`, or a dead letter when `dueAt` is null. A dead letter that must
   * not hold back its ordering key (`leaveKey`) leaves it: the key's later messages then run.
   */
  async fail(claim: Claim, attempts: number, lastError: string | null, dueAt: Date | null, now: number, leaveKey = false): Promise<boolean> {
    return this.whileClaimed(
      `UPDATE ${TABLE} SET status = NULL, claimedBy = NULL, claimedAt = NULL, attempts = ?, lastError = ?,
         lastAttemptTimestamp = ?, dueAt = ?${leaveKey ? ', orderingKey = NULL' : ''}`,
      [attempts, lastError, iso(now), dueAt && iso(dueAt)],
      claim
    )
  }

  /** Hands a claimed row back unprocessed, due at `dueAt`. */
  async release(claim: Claim, dueAt: Date): Promise<boolean> {
    return this.whileClaimed(`UPDATE ${TABLE} SET status = NULL, claimedBy = NULL, claimedAt = NULL, dueAt = ?`, [iso(dueAt)], claim)
  }

  /**
   * The current transaction, for several messages to share (see `savepointed`). It begins with the first statement
   * of one of them: until then it holds no connection (SQLite's pool has one), so handlers of other batches that
   * run no statement, or not yet, are not kept waiting.
   */
  sharedTransaction(): DatabaseTransaction {
    const tx = transactionOfContext()
    if (!tx) throw new Error('cds-event-queues: a batch of messages needs an open database transaction')
    return tx
  }

  /**
   * The shared transaction `shared` as one message sees it: a savepoint `name` is taken right before the message's
   * first statement (its handlers' or the store's), so a failing message rolls back its own work only, and a message
   * that runs no statement costs none. `name` is generated by the caller, never user input.
   */
  savepointed(shared: DatabaseTransaction, name: string): Savepointed {
    const exec = (sql: string) => this.dialect.execute(shared.dbc, sql, [], false)
    let taken: Promise<unknown> | undefined
    const take = async () => void (await (taken ??= begun(shared).then(() => exec(`SAVEPOINT ${name}`))))
    const dispatch = (Object.getPrototypeOf(shared) as DatabaseTransaction).dispatch
    // The shared transaction begins in `take`, so CAP's begin-on-first-statement step is skipped: the service's dispatch.
    const tx = Object.create(shared, {
      [$beforeStatement]: { value: take },
      dispatch: { value: async function (this: DatabaseTransaction, req: unknown) { await take(); return dispatch.call(this, req) } }
    }) as DatabaseTransaction
    return {
      tx,
      rollback: async () => {
        if (!(await taken?.then(() => true, () => false))) return
        await exec(`ROLLBACK TO SAVEPOINT ${name}`)
        await exec(`RELEASE SAVEPOINT ${name}`)
      },
      release: async () => {
        if (taken) await exec(`RELEASE SAVEPOINT ${name}`)
      }
    }
  }

  /**
   * Deletes the rows of processed messages of one claim (a slot's) in one statement, each only while the claim holds
   * it; the number deleted.
   */
  async completeAll(claims: Claim[]): Promise<number> {
    const held = heldByAll(claims)
    return this.changes(`DELETE FROM ${TABLE} WHERE ${held.sql}`, held.params)
  }

  /** Moves the leases of `claims` (of one claim, as a slot's are) to `until`; the IDs of those still held. */
  async renewAll(claims: Claim[], until: number): Promise<Set<string>> {
    const held = heldByAll(claims)
    const rows = await this.rows<{ ID: string }>(`UPDATE ${TABLE} SET dueAt = ? WHERE ${held.sql} RETURNING ID AS "ID"`, [iso(until), ...held.params])
    return new Set(rows.map(r => r.ID))
  }

  /**
   * When the next row becomes due (or a lease expires) after `after`, the time of a claim that found nothing;
   * undefined if nothing is pending. Rows due by then were skipped by that claim: their ordering key is busy, or
   * another process is claiming them. Their turn comes with a wake-up (a finished message), not with a timer.
   */
  async nextDue(after: number): Promise<number | undefined> {
    const rows = (await this.rows(
      `SELECT ${this.dialect.isoText('MIN(dueAt)')} AS "next" FROM ${TABLE} WHERE ${this.own.sql} AND dueAt > ?`,
      [...this.own.params, iso(after)]
    )) as { next: unknown }[]
    const next = millis(rows[0]?.next)
    return Number.isNaN(next) ? undefined : next
  }

  /**
   * Creates the indexes the claim needs if they are missing (idempotent; see `INDEXES`). Existing ones are looked up
   * first: on PostgreSQL even `CREATE INDEX IF NOT EXISTS` waits for a lock that conflicts with every running
   * claim and completion, so an instance starting beside a busy one would sit there while the other drains.
   */
  async ensureIndexes(): Promise<void> {
    const existing = await this.indexNames()
    for (const [name, definition] of INDEXES) {
      if (existing.has(name.toLowerCase())) continue
      try {
        await this.changes(`CREATE INDEX IF NOT EXISTS ${name} ON ${TABLE} ${definition}`, [])
      } catch (e) {
        // Instances starting at the same moment race to create it; PostgreSQL fails the later ones with a duplicate.
        if (!(await this.indexNames()).has(name.toLowerCase())) cds.log('queue').warn(`could not create index ${name}; claims work without it, but slower:`, e)
      }
    }
  }

  private async indexNames(): Promise<Set<string>> {
    return new Set((await this.rows<{ name: string }>(this.dialect.indexesOf(TABLE), [])).map(r => r.name.toLowerCase()))
  }
}
