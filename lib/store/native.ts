import cds from '@sap/cds'
import type { Result } from '../cap/drivers'
import type { Watchers } from '../cap/handlers'
import { begun, currentConnection, transactionOfContext, withFirstStatementHook, type DatabaseTransaction } from '../cap/transactions'
import { groupBy } from '../group-by'
import type { Claim, DeadOnArrival, DeletedMessage, MessageRow, NewMessage, QueueSnapshot, ReceiptRef, RowState } from '../interfaces'
import { lockWhenBegun, type Dialect } from './dialect'
import { dialectFor } from './dialects'
import { ensureIndexes } from './indexes'
import { distinctKeys, iso, messageRow, millis, newRow, rowState, type RawRow } from './rows'
import { ENTITY, expiredSql, oldRowsSql, ownRowsSql, serviceOfOldRow, serviceOfTask, TABLE, type AttemptLimits, type ClaimIndex, type Fragment, type Retentions, type TaskRow } from './rules'
import { insertDeadLetter } from './portable-queries'
import { numberClaimed, type Numbering } from './sequences'
import { SideConnection } from './side-connection'
import * as statements from './statements'
import type { Described } from './statements'
import type { BatchingStore, Parked, Savepointed } from './queue-store'
import { inOwnTransaction } from './index'
import { clock } from '../time/clock'

/** How many rows (parked keys) one statement of the reconciliation looks at, at most: it never holds long locks. */
const RECONCILE_BATCH = 1000

/**
 * The native store: every statement the queue runs against `cds.outbox.Messages` as raw SQL on the driver connection
 * of SQLite and PostgreSQL, one method each (the SQL text is in statements.ts). Statements run on the connection of
 * the current transaction (`cds.db` joins `cds.context`), so an enqueue is part of the caller's transaction and a
 * completion is part of the handler's.
 */
export class NativeStore implements BatchingStore, Numbering {
  private readonly dialect: Dialect
  /** This app's rows (`appid`), and the same for the rows `e` of the ordering-key checks. */
  private readonly own: Fragment
  private readonly ownE: Fragment
  /** The same for the rows `f` and `p` of the statements on parked messages (see `promoteNext`, `parkedKeys`). */
  private readonly ownF: Fragment
  private readonly ownP: Fragment
  /** Where the reconciliation's look at parked keys continues (see `promoteOrphans`). */
  private parkedAfter = ''
  /** This app's rows from before CAP had `appid` (see `oldRowsSql`), claimed while there are any. */
  private readonly old: Fragment | undefined
  private oldRowsLeft = true
  /** Transactions that already signal other processes on commit (see `signalOthers`). */
  private readonly signalled = new WeakSet<object>()
  /** Where renewals run when they must not wait for a pooled connection (see SideConnection). */
  private readonly side: SideConnection | undefined

  constructor(
    kind: string | undefined,
    private readonly appid: string | undefined,
    /** Handlers others registered on the table: while there are any, new rows are written through CAP, for them. */
    private readonly watchers?: Watchers
  ) {
    this.dialect = dialectFor(kind)
    this.own = ownRowsSql(appid)
    this.ownE = ownRowsSql(appid, 'e.')
    this.ownF = ownRowsSql(appid, 'f.')
    this.ownP = ownRowsSql(appid, 'p.')
    this.old = oldRowsSql(appid)
    this.side = this.dialect.renewsOutsideThePool ? new SideConnection() : undefined
  }

  /** The statement a dedicated connection runs to be told of new messages; undefined where only polling works. */
  get listenStatement(): string | undefined {
    return this.dialect.wakeUp?.listen
  }

  private async rows<T>({ sql, params }: Fragment): Promise<T[]> {
    return (await this.execute(sql, params, true)).rows as T[]
  }

  private async changes({ sql, params }: Fragment): Promise<number> {
    return (await this.execute(sql, params, false)).changes
  }

  /** Runs a statement in the current transaction, on its own connection (see `currentConnection`), else through CAP. */
  private async execute(sql: string, params: unknown[], reads: boolean): Promise<Result> {
    const prepared = this.dialect.prepare(sql)
    const connection = await currentConnection()
    if (connection) return this.dialect.execute(connection, prepared, params, reads)
    const result = (await (cds.db as unknown as { run(sql: string, params: unknown[]): Promise<unknown> }).run(prepared, params)) as
      | Result['rows']
      | { changes?: number }
      | number
    if (reads) return { rows: result as Result['rows'], changes: 0 }
    return { rows: [], changes: typeof result === 'number' ? result : ((result as { changes?: number })?.changes ?? 0) }
  }

  /** Whether handlers others registered on the table want to see `event` writes (see `Watchers`). */
  private watched(event: 'CREATE' | 'UPSERT'): boolean {
    return !!this.watchers?.watch(event, ENTITY)
  }

  /**
   * Writes a new message in the current transaction. One with an ordering key is parked at once if an earlier
   * message of its key is waiting (see `PARKED`); rows written through CAP are parked by the reconciliation.
   */
  async insert(message: NewMessage): Promise<void> {
    const appid = this.appid ?? null
    const { orderingKey } = message
    if (this.watched('CREATE')) await INSERT.into(ENTITY).entries(newRow(message, appid))
    else if (orderingKey) await this.changes(statements.insertKeyed(this.dialect, { ...message, orderingKey }, appid, this.ownE))
    else await this.changes(statements.insert(message, appid))
    await this.signalOthers()
  }

  /**
   * Writes a new message already claimed by `claim` until `leaseUntil`, for the enqueuing process to run right after
   * the commit. No other process needs to hear of it; if this one dies first, the lease expires and any takes it.
   */
  async insertClaimed(message: NewMessage, claim: Claim, leaseUntil: number): Promise<void> {
    if (this.watched('CREATE')) await INSERT.into(ENTITY).entries(newRow(message, this.appid ?? null, claim, leaseUntil))
    else await this.changes(statements.insertClaimed(message, this.appid ?? null, claim, leaseUntil))
  }

  /** Writes a new dead letter through CAP (a rare row, which no claim and no wake-up concerns). */
  async insertDeadLetter(message: NewMessage, dead: DeadOnArrival): Promise<void> {
    await insertDeadLetter(message, this.appid ?? null, dead)
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
    await this.rows({ sql: wakeUp.signal, params: [] })
    if (tx) this.signalled.add(tx)
  }

  /**
   * Writes a scheduled task: a new row, or its existing row replaced (payload, timing, queue) with failure state and
   * claim reset, so re-scheduling also revives a dead letter. A run in progress finds out when it completes.
   */
  async upsertTask(message: NewMessage): Promise<void> {
    if (this.watched('UPSERT')) {
      const reset = { attempts: 0, lastError: null, status: null, claimedBy: null, claimedAt: null }
      await UPSERT.into(ENTITY).entries({ ...newRow(message, this.appid ?? null), ...reset })
    } else await this.changes(statements.upsertTask(message, this.appid ?? null))
    await this.signalOthers()
  }

  /** Removes a scheduled task, whatever its state; the number of rows removed. */
  async unschedule(ID: string): Promise<number> {
    return this.changes(statements.deleteRow(ID))
  }

  /** Removes those of the rows `IDs` that are this app's task `task` of `service`; the number removed. */
  async unscheduleTaskOf(IDs: string[], task: string, service: string): Promise<number> {
    const rows = await this.rows<TaskRow>(statements.taskRows(IDs, task, this.own))
    const mine = rows.filter(row => serviceOfTask(row, this.appid) === service).map(row => row.ID)
    return mine.length ? this.changes(statements.deleteTask(mine, task, this.own)) : 0
  }

  /**
   * Claims up to `limit` due rows for `owner` until `leaseUntil`, skipping the queues in `skipTargets` (full in this
   * process), the services in `skipServices` (whose broker this process waits for) and rows whose ordering key is busy, while their stored messages add up to at most `maxBytes` (the first
   * one whatever its size). A row whose previous lease expired counts that lost attempt, so a message that kills its
   * process every time still ends as a dead letter.
   */
  async claim(owner: string, now: number, leaseUntil: number, limit: number, skipTargets: string[] = [], maxBytes = Number.MAX_SAFE_INTEGER, skipServices: string[] = []): Promise<MessageRow[]> {
    const claimedAt = iso(now)
    const claim = (own: Fragment, rows: number, bytes: number) =>
      this.changes(statements.claim(own, this.ownE, this.dialect, owner, claimedAt, leaseUntil, rows, skipTargets, bytes, skipServices))
    let claimed = await claim(this.own, limit, maxBytes)
    if (claimed < limit && this.old && this.oldRowsLeft) {
      // what the first claim left of the bytes, asked only while rows from before CAP had appid may be left
      const [{ bytes }] = await this.rows<{ bytes: unknown }>(statements.claimedBytes(owner, claimedAt))
      if (Number(bytes) < maxBytes) {
        const old = await claim(this.old, limit - claimed, maxBytes - Number(bytes))
        if (old === 0) this.oldRowsLeft = false
        claimed += old
      }
    }
    if (claimed === 0) return []
    const rows = await this.rows<RawRow>(statements.claimedRows(this.dialect, owner, claimedAt))
    const handedBack = this.dialect.keyLock ? await this.keysTakenMeanwhile(rows, owner, now) : new Set<string>()
    return numberClaimed(this, rows.filter(r => !handedBack.has(r.ID)).map(r => this.messageRow(r)))
  }

  /** A claimed row for the runner; an old row without `appid` is for the service its target names (CAP 10's rule). */
  private messageRow(raw: RawRow): MessageRow {
    const row = messageRow(raw)
    return this.appid && row.appid === null ? { ...row, serviceOfOldRow: serviceOfOldRow(row.target, this.appid) } : row
  }

  /**
   * PostgreSQL: two claims that started from different snapshots may each see a different row of one key as free.
   * Each claim holds the key's lock from its read-back to its commit, and checks the key again after taking it (a
   * new statement sees every claim that committed before): a row whose key is locked by a claim in progress, or now
   * runs elsewhere, is handed back at once. Unordered claims skip this.
   */
  private async keysTakenMeanwhile(rows: RawRow[], owner: string, now: number): Promise<Set<string>> {
    const keyed = rows.filter(r => r.orderingKey !== null && r.orderingKey !== undefined)
    if (keyed.length === 0) return new Set()
    const taken = await this.rows<{ ID: string }>(statements.keysRunningElsewhere(this.ownE, owner, iso(now)))
    const handBack = new Set([...keyed.filter(r => !r.keyLocked).map(r => r.ID), ...taken.map(r => r.ID)])
    if (handBack.size) await this.release([...handBack].map(ID => ({ ID, claimedBy: owner, claimedAt: now })))
    return handBack
  }

  /** Deletes a processed row, in the handler's transaction; false if the claim was lost meanwhile. */
  async complete(claim: Claim): Promise<boolean> {
    return (await this.completeAll([claim])) === 1
  }

  /**
   * Deletes the rows of processed messages of one claim (a slot's) in one statement, each only while the claim holds
   * it; the number deleted. The next message of each of their ordering keys becomes due in the same transaction.
   */
  async completeAll(claims: Claim[]): Promise<number> {
    const deleted = await this.changes(statements.complete(claims))
    if (deleted) await this.promoteNext(claims.map(c => c.orderingKey))
    return deleted
  }

  /**
   * The first message of each of `keys` becomes due if it was parked: where a message of the key was deleted or
   * left its key, in the same transaction. A key whose first message is still in the table is left as it is.
   */
  async promoteNext(keys: (string | null | undefined)[]): Promise<void> {
    const distinct = distinctKeys(keys)
    if (distinct.length) await this.changes(statements.promoteNext(distinct, this.ownF))
  }

  /**
   * Moves a completed occurrence of a recurring task to its next one, in the handler's transaction, so the
   * completion and the next occurrence commit together; false if the claim is gone.
   */
  async recur(claim: Claim, timestamp: string, dueAt: Date): Promise<boolean> {
    return (await this.changes(statements.recur(claim, timestamp, dueAt))) === 1
  }

  /**
   * Whether a task row still holds the occurrence that was claimed with this `timestamp`. Re-scheduling and
   * recurring write a new timestamp and unscheduling deletes the row; a takeover after an expired lease changes neither.
   */
  async holdsOccurrence(ID: string, timestamp: number): Promise<boolean> {
    const rows = await this.rows<{ timestamp: unknown }>(statements.taskTimestamp(this.dialect, ID))
    return rows.length > 0 && millis(rows[0].timestamp) === timestamp
  }

  /**
   * Records a failed attempt: due again at `dueAt`, or a dead letter when `dueAt` is null. A dead letter that must
   * not hold back its ordering key (`leaveKey`) leaves it: the key's later messages then run.
   */
  async fail(claim: Claim, attempts: number, lastError: string | null, dueAt: Date | null, now: number, leaveKey: boolean, described: Described): Promise<boolean> {
    const recorded = (await this.changes(statements.fail(claim, attempts, lastError, dueAt, now, leaveKey, described))) === 1
    if (recorded && leaveKey) await this.promoteNext([claim.orderingKey])
    return recorded
  }

  /**
   * Hands claimed rows back unprocessed, due at `dueAt` (default: at the time they were claimed); the number handed
   * back. A row completed meanwhile, or now claimed by another process, is left alone. `alone`: the rows run alone
   * from now on (they count as interrupted, see the claim).
   */
  async release(claims: Claim[], dueAt?: Date, alone = false): Promise<number> {
    let released = 0
    // One statement per claim: rows of one claim share owner and time (`underClaims`).
    for (const group of groupBy(claims, c => `${c.claimedBy} ${c.claimedAt}`).values()) {
      released += await this.changes(statements.release(group, dueAt ?? new Date(group[0].claimedAt), alone))
    }
    return released
  }

  async waitForBroker(claim: Claim, dueAt: Date, lastError: string, described: Described): Promise<boolean> {
    return (await this.changes(statements.waitForBroker(claim, dueAt, lastError, described))) === 1
  }

  async clearWaitingMarks(service: string): Promise<void> {
    await this.changes(statements.clearWaitingMarks(this.own, service))
  }

  async aliveOf(service: string, limits: AttemptLimits): Promise<number> {
    const [row] = await this.rows<{ count: unknown }>(statements.aliveOf(this.own, service, limits))
    return Number(row?.count ?? 0)
  }

  /** Marks the attempts of `claims` (of one claim) as started, so the takeover of their leases counts them. */
  async interrupt(claims: Claim[]): Promise<void> {
    if (claims.length) await this.changes(statements.interrupt(claims))
  }

  /**
   * Moves the leases of `claims` (of one claim, as a slot's are) to `until`, in a transaction of its own (on
   * PostgreSQL on the runner's own connection: the handler slots may hold every pooled one); the IDs still held.
   */
  async renewAll(claims: Claim[], until: number): Promise<Set<string>> {
    const { sql, params } = statements.renew(claims, until, clock.now())
    const rows = this.side
      ? (await this.side.run(this.dialect.prepare(sql), params)).rows
      : await inOwnTransaction(() => this.rows<Record<string, unknown>>({ sql, params }))
    return new Set(rows.map(r => r.ID as string))
  }

  /** Closes what the store opened of its own (the side connection). */
  async close(): Promise<void> {
    await this.side?.close()
  }

  /**
   * Brings the plugin's index columns in line with CAP's columns where others wrote them (see rules.ts): dead letters
   * with attempts below their queue's limit again become due; rows another writer released lose their claim; rows
   * another runner holds get a lease of `timeout`; parked rows whose key has no earlier message any more become due.
   * The number of rows changed. Keyed rows others wrote are parked by `park`.
   */
  async reconcile(limits: AttemptLimits, now: number, timeout: number): Promise<number> {
    const { dialect } = this
    let changed = await this.changes(statements.resurrect(this.own, limits, dialect, now))
    changed += await this.changes(statements.releasedByOthers(this.own, dialect, now))
    changed += await this.changes(statements.observeForeignClaims(this.own, dialect, now, timeout, true))
    changed += await this.changes(statements.observeForeignClaims(this.own, dialect, now, timeout, false))
    changed += await this.promoteOrphans()
    // Old rows appear while CAP's runners of older versions still write during an upgrade: look again now and then.
    this.oldRowsLeft = !!this.old
    return changed
  }

  /**
   * Parks keyed rows others wrote behind an earlier message of their key, at most `RECONCILE_BATCH` (see
   * `QueueStore.park`).
   */
  async park(): Promise<Parked> {
    const parked = await this.changes(statements.park(this.own, this.ownE, this.dialect, RECONCILE_BATCH))
    return { parked, more: parked === RECONCILE_BATCH }
  }

  /**
   * Parked messages whose key has no earlier message any more become due: the safety net of `promoteNext`, for
   * what it cannot see (see `parkedKeys`). Walks the parked keys in portions, one index probe per key, so a pass
   * costs the same with 10 or 100,000 parked messages behind one key.
   */
  private async promoteOrphans(): Promise<number> {
    const keys = await this.rows<{ key: string; first: string | null }>(statements.parkedKeys(this.ownP, this.ownF, this.parkedAfter, RECONCILE_BATCH))
    this.parkedAfter = keys.length === RECONCILE_BATCH ? keys[keys.length - 1].key : ''
    const firsts = keys.map(k => k.first).filter((ID): ID is string => !!ID)
    return firsts.length ? this.changes(statements.unpark(firsts)) : 0
  }

  /** CAP's columns and the claim of the rows `IDs` that exist, as the current transaction sees them. */
  async rowStates(IDs: string[]): Promise<RowState[]> {
    return (await this.rows<Record<string, unknown>>(statements.rowStates(this.dialect, IDs))).map(rowState)
  }

  /** Gives up the row `claim` holds, its index written as `index` says; false if the claim did not hold it. */
  async reindex(claim: Claim, index: ClaimIndex): Promise<boolean> {
    return (await this.changes(statements.reindex(claim, index))) === 1
  }

  /** Which of `claims` the table holds (their rows exist, still under these claims): their IDs. */
  async stillClaimed(claims: Claim[]): Promise<Set<string>> {
    const held = new Set<string>()
    for (const group of groupBy(claims, c => `${c.claimedBy} ${c.claimedAt}`).values()) {
      for (const { ID } of await this.rows<{ ID: string }>(statements.whichStillClaimed(group))) held.add(ID)
    }
    return held
  }

  /** The claims held in the names `owners` according to the table. */
  async claimsOf(owners: string[]): Promise<Claim[]> {
    const rows = await this.rows<{ ID: string; claimedBy: string; claimedAt: unknown }>(statements.claimsOf(this.dialect, owners))
    return rows.map(r => ({ ID: r.ID, claimedBy: r.claimedBy, claimedAt: millis(r.claimedAt) }))
  }

  /**
   * The current transaction, for several messages to share (see `savepointed`). It begins with the first statement
   * of one of them: until then it holds no connection (SQLite's pool has one), so handlers of other batches that
   * run no statement, or not yet, are not kept waiting.
   */
  sharedTransaction(): DatabaseTransaction {
    const tx = transactionOfContext()
    if (!tx) throw new Error('cds-event-queues: a batch of messages needs an open database transaction')
    // its handlers read and write like one message's (see `lockOnBegin`)
    lockWhenBegun(this.dialect)
    return tx
  }

  /** See `QueueStore.lockOnBegin`: SQLite's write lock, taken by the dialect's statement. */
  lockOnBegin(): void {
    lockWhenBegun(this.dialect)
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
    return {
      tx: withFirstStatementHook(shared, take),
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
   * When the next row becomes due (or a lease expires) after `after`, the time of a claim that found nothing;
   * undefined if nothing is pending. Rows due by then were skipped by that claim: their ordering key is busy, or
   * another process is claiming them. Their turn comes with a wake-up (a finished message), not with a timer.
   */
  async nextDue(after: number, skipTargets: string[] = []): Promise<number | undefined> {
    const rows = await this.rows<{ next: unknown }>(statements.nextDue(this.dialect, this.own, after, skipTargets))
    const next = millis(rows[0]?.next)
    return Number.isNaN(next) ? undefined : next
  }

  /** See `QueueStore.queueStatistics`: one statement, one pass over the table. */
  async queueStatistics(limits: AttemptLimits, now: number): Promise<QueueSnapshot[]> {
    type Row = { queue: string; pending: unknown; processing: unknown; dead: unknown; oldestDue: unknown }
    const rows = await this.rows<Row>(statements.queueStatistics(this.dialect, this.own, limits, now))
    return rows.map(r => {
      const due = millis(r.oldestDue)
      const relayLag = Number.isNaN(due) ? 0 : Math.max(0, Math.floor((now - due) / 1000))
      return { queue: r.queue, pending: Number(r.pending ?? 0), processing: Number(r.processing ?? 0), dead: Number(r.dead ?? 0), relayLag }
    })
  }

  /** See `QueueStore.deleteExpiredDeadLetters`: one statement that reads back what it deleted. */
  async deleteExpiredDeadLetters(limits: AttemptLimits, retentions: Retentions, now: number, limit: number): Promise<DeletedMessage[]> {
    const expired = expiredSql(retentions, now)
    if (!expired) return []
    return this.rows<DeletedMessage>(statements.deleteExpiredDeadLetters(this.own, limits, expired, this.dialect, limit))
  }

  async ping(): Promise<void> {
    await this.rows(statements.ping())
  }

  /** See `Numbering.nextSequence`: an upsert that reads back the number it wrote. */
  async nextSequence(orderingKey: string): Promise<number> {
    const [row] = await this.rows<{ issued: unknown }>(statements.nextSequence(this.appid ?? null, orderingKey))
    return Number(row.issued)
  }

  async assignSequence(ID: string, sequence: number): Promise<void> {
    await this.changes(statements.assignSequence(ID, sequence))
  }

  /** See `QueueStore.receive`: an upsert that reads back how often the receipt was redelivered. */
  async receive(receipt: ReceiptRef, now: number): Promise<boolean> {
    const [row] = await this.rows<{ duplicates: unknown }>(statements.receive(receipt, now))
    return Number(row.duplicates) === 0
  }

  /** See `QueueStore.countRedelivery`: an UPDATE by the key, which finds nothing for a receipt never recorded. */
  async countRedelivery(receipt: ReceiptRef): Promise<boolean> {
    return (await this.changes(statements.countRedelivery(receipt))) > 0
  }

  /** See `QueueStore.tryLock`: on PostgreSQL an advisory lock, in the space of the ordering keys' locks (a hash collision only makes one of them wait a moment). */
  async tryLock(name: string): Promise<boolean> {
    const lock = this.dialect.nameLock?.('?')
    if (!lock) return true
    const [row] = await this.rows<{ locked: unknown }>({ sql: `SELECT ${lock} AS "locked"`, params: [name] })
    return row.locked === true
  }

  /** Creates the indexes the claim needs if they are missing (see `ensureIndexes`). */
  async ensureIndexes(): Promise<void> {
    await ensureIndexes({
      indexNames: async () => new Set((await this.rows<{ name: string }>({ sql: this.dialect.indexesOf(TABLE), params: [] })).map(r => r.name.toLowerCase())),
      run: sql => this.changes({ sql, params: [] })
    })
  }
}
