import cds from '@sap/cds'
import { groupBy } from '../group-by'
import type { Claim, DeadOnArrival, DeletedMessage, MessageRow, NewMessage, QueueSnapshot, ReceiptRef, RowState } from '../interfaces'
import { lockWhenBegun, type Dialect } from './dialect'
import { inOwnTransaction } from './index'
import { ensureIndexes } from './indexes'
import { KeyClock } from './key-clock'
import { distinctKeys, iso, messageRow, millis, rowState } from './rows'
import { expiredCqn, oldRowsCqn, ownRowsCqn, PROCESSING, serviceOfOldRow, serviceOfTask, TABLE, type AttemptLimits, type ClaimIndex, type Retentions, type TaskRow } from './rules'
import * as q from './portable-queries'
import type { Candidate, ClaimRow, Cqn } from './portable-queries'
import type { Parked, QueueStore } from './queue-store'
import { numberClaimed, type Numbering } from './sequences'
import type { Described } from './statements'
import { clock } from '../time/clock'

/**
 * The portable store: the same statements as the native store (native.ts), in CQL through the current transaction,
 * so it runs on every database CAP runs on (SAP HANA, sql.js, SQLite and PostgreSQL too). What differs, and why:
 * - The claim is a locking SELECT (`forUpdate({ ignoreLocked: true })`: rows another claim holds are skipped) with
 *   the ordering-key checks as correlated subqueries, then UPDATEs by ID, each guarded by the state it read, so a
 *   database without row locks (SQLite) still never gives one row to two claims. Keys are re-checked after locking
 *   (see `keysStillFree`) instead of PostgreSQL's advisory locks.
 * - No savepoints (CAP documents none), so no batches: the runner runs a transaction per message (queue-store.ts).
 * - No wake-up across processes: other instances find new messages by polling.
 * - Indexes: on SQLite and PostgreSQL (`indexes`) the runner creates the native store's; on SAP HANA they come with
 *   the model (db/hana.cds, `cds build --for hana`).
 */

/**
 * How many of a key's first due rows a claim locks (see `keysStillFree`): a claim elsewhere that took a row of the key
 * from an older snapshot holds one of them, unless this many rows of the key with earlier timestamps committed in the
 * moment between the two claims' reads.
 */
const KEY_LOCK_WINDOW = 8

/** Up to this many due rows of a claim's keys are all locked in one statement (see `keysLockedElsewhere`). */
const KEYED_ROWS_LOCKED = 1000

/** Keyed messages enqueued in one millisecond get distinct milliseconds (see `ordered`). */
const keyClock = new KeyClock()

export class PortableStore implements QueueStore, Numbering {
  private readonly own: Cqn
  private readonly old: Cqn | undefined
  private oldRowsLeft = true
  readonly listenStatement = undefined

  constructor(
    private readonly appid: string | undefined,
    /** The native dialect where the database has one: to create the claim's indexes at start, and SQLite's write lock. */
    private readonly indexes?: Dialect
  ) {
    this.own = ownRowsCqn(appid)
    this.old = oldRowsCqn(appid)
  }

  async insert(message: NewMessage): Promise<void> {
    await q.insert(ordered(message), this.appid ?? null)
  }

  async insertClaimed(message: NewMessage, claim: Claim, leaseUntil: number): Promise<void> {
    await q.insert(ordered(message), this.appid ?? null, claim, leaseUntil)
  }

  async insertDeadLetter(message: NewMessage, dead: DeadOnArrival): Promise<void> {
    await q.insertDeadLetter(message, this.appid ?? null, dead)
  }

  async upsertTask(message: NewMessage): Promise<void> {
    await q.upsertTask(message, this.appid ?? null)
  }

  async unschedule(ID: string): Promise<number> {
    return Number(await q.deleteRow(ID))
  }

  async unscheduleTaskOf(IDs: string[], task: string, service: string): Promise<number> {
    const rows = (await q.taskRows(IDs, task, this.own)) as TaskRow[]
    const mine = rows.filter(row => serviceOfTask(row, this.appid) === service).map(row => row.ID)
    return mine.length ? Number(await q.deleteTask(mine, task, this.own)) : 0
  }

  async claim(owner: string, now: number, leaseUntil: number, limit: number, skipTargets: string[] = [], maxBytes = Number.MAX_SAFE_INTEGER, skipServices: string[] = []): Promise<MessageRow[]> {
    const claimedAt = iso(now)
    const skip = { targets: skipTargets, services: skipServices }
    const own = await this.claimFrom(this.own, owner, claimedAt, leaseUntil, limit, skip, maxBytes)
    let rows = own.rows
    if (rows.length < limit && own.bytes < maxBytes && this.old && this.oldRowsLeft) {
      const old = await this.claimFrom(this.old, owner, claimedAt, leaseUntil, limit - rows.length, skip, maxBytes - own.bytes)
      if (old.rows.length === 0) this.oldRowsLeft = false
      rows = rows.concat(old.rows)
    }
    return numberClaimed(this, rows.sort((a, b) => a.timestamp - b.timestamp))
  }

  /**
   * One claim over the rows `own` selects: lock the candidates, keep those whose key stays free and, in due order,
   * whose messages add up to at most `maxBytes` (the first whatever its size), mark them claimed, then read them.
   * The candidates are read without their messages: only the claimed ones' are read, so a backlog of large messages
   * costs the process what the claim takes. The rows and the bytes of their messages.
   */
  private async claimFrom(own: Cqn, owner: string, claimedAt: string, leaseUntil: number, limit: number, skip: q.Skip, maxBytes: number): Promise<{ rows: MessageRow[]; bytes: number }> {
    const candidates = (await q.candidates(own, this.own, claimedAt, limit, skip)) as Candidate[]
    if (candidates.length === 0) return { rows: [], bytes: 0 }
    const taken = withinBytes(await this.keysStillFree(candidates, claimedAt), maxBytes)
    const fresh = taken.filter(r => r.status === null || r.status === undefined)
    const expired = taken.filter(r => r.status !== null && r.status !== undefined)
    let claimed = fresh.length ? Number(await q.claimFresh(fresh.map(r => r.ID), owner, claimedAt, leaseUntil)) : 0
    for (const row of expired) claimed += Number(await q.claimExpired(row, owner, claimedAt, leaseUntil))
    if (claimed === 0) return { rows: [], bytes: 0 }
    const rows = (await q.claimedRows(owner, claimedAt, taken.map(r => r.ID))) as ClaimRow[]
    const read = new Set(rows.map(r => r.ID))
    return { rows: rows.map(r => this.messageRow(r)), bytes: taken.reduce((sum, r) => sum + (read.has(r.ID) ? Number(r.size ?? 0) : 0), 0) }
  }

  /**
   * The candidates whose ordering key is still free once this claim holds it. Two claims that started from different
   * snapshots may each see a different row of one key as its first (one committed late with an earlier timestamp):
   * the one that decided first holds a lock on one of the key's first due rows as the later one sees them, so each
   * keyed candidate's key has those rows locked here (skipping rows others hold) and read without a lock: a row that
   * could not be locked is such a claim in progress, and the key waits. Then the keys are checked again in a new
   * statement, which sees every claim that committed before it (the native store does the same with an advisory lock).
   */
  private async keysStillFree(candidates: Candidate[], claimedAt: string): Promise<Candidate[]> {
    const keyed = candidates.filter(r => r.orderingKey !== null && r.orderingKey !== undefined)
    if (keyed.length === 0) return candidates
    const busy = await this.keysLockedElsewhere([...new Set(keyed.map(r => r.orderingKey as string))], claimedAt)
    const ask = keyed.filter(r => !busy.has(r.orderingKey as string)).map(r => r.ID)
    const free = new Set(ask.length ? ((await q.stillFree(ask, this.own, claimedAt)) as { ID: string }[]).map(r => r.ID) : [])
    return candidates.filter(r => r.orderingKey === null || r.orderingKey === undefined || free.has(r.ID))
  }

  /**
   * The keys of `keys` one of whose due rows another transaction holds locked. Usually all due rows of the keys are
   * few: they are read, then locked by ID in one statement each. Where a key has a long backlog, only each key's
   * first rows (`KEY_LOCK_WINDOW`) are, two statements per key.
   */
  private async keysLockedElsewhere(keys: string[], claimedAt: string): Promise<Set<string>> {
    const busy = new Set<string>()
    const due = (await q.dueRowsOfKeys(this.own, keys, claimedAt, KEYED_ROWS_LOCKED + 1)) as { ID: string; orderingKey: string }[]
    if (due.length <= KEYED_ROWS_LOCKED) {
      const locked = new Set(((await q.lockUnclaimed(due.map(r => r.ID))) as { ID: string }[]).map(r => r.ID))
      for (const row of due) if (!locked.has(row.ID)) busy.add(row.orderingKey)
      return busy
    }
    for (const key of keys) {
      const locked = new Set(((await q.firstRowsOfKey(this.own, key, claimedAt, KEY_LOCK_WINDOW, true)) as { ID: string }[]).map(r => r.ID))
      const first = (await q.firstRowsOfKey(this.own, key, claimedAt, KEY_LOCK_WINDOW, false)) as { ID: string }[]
      if (first.some(r => !locked.has(r.ID))) busy.add(key)
    }
    return busy
  }

  /** A claimed row for the runner; an old row without `appid` is for the service its target names (CAP 10's rule). */
  private messageRow(raw: ClaimRow): MessageRow {
    const { status: _s, claimedBy: _c, ...rest } = raw
    const row = messageRow({ ...rest, attempts: Number(raw.attempts ?? 0), interrupted: Number(raw.interrupted ?? 0) })
    return this.appid && row.appid === null ? { ...row, serviceOfOldRow: serviceOfOldRow(row.target, this.appid) } : row
  }

  async complete(claim: Claim): Promise<boolean> {
    return Number(await q.complete([claim])) === 1
  }

  async completeAll(claims: Claim[]): Promise<number> {
    return Number(await q.complete(claims))
  }

  async recur(claim: Claim, timestamp: string, dueAt: Date): Promise<boolean> {
    return Number(await q.recur(claim, timestamp, dueAt)) === 1
  }

  async holdsOccurrence(ID: string, timestamp: number): Promise<boolean> {
    const row = (await q.taskTimestamp(ID)) as { timestamp: unknown } | undefined
    return !!row && millis(row.timestamp) === timestamp
  }

  async fail(claim: Claim, attempts: number, lastError: string | null, dueAt: Date | null, now: number, leaveKey: boolean, described: Described): Promise<boolean> {
    return Number(await q.fail(claim, attempts, lastError, dueAt, now, leaveKey, described)) === 1
  }

  async release(claims: Claim[], dueAt?: Date, alone = false): Promise<number> {
    let released = 0
    // One statement per claim: rows of one claim share owner and time (`underClaimsCqn`).
    for (const group of groupBy(claims, c => `${c.claimedBy} ${c.claimedAt}`).values()) {
      released += Number(await q.release(group, dueAt ?? new Date(group[0].claimedAt), alone))
    }
    return released
  }

  async waitForBroker(claim: Claim, dueAt: Date, lastError: string, described: Described): Promise<boolean> {
    return Number(await q.waitForBroker(claim, dueAt, lastError, described)) === 1
  }

  async clearWaitingMarks(service: string): Promise<void> {
    await q.clearWaitingMarks(this.own, service)
  }

  async aliveOf(service: string, limits: AttemptLimits): Promise<number> {
    const row = (await q.aliveOf(this.own, service, limits)) as { count: unknown } | undefined
    return Number(row?.count ?? 0)
  }

  async interrupt(claims: Claim[]): Promise<void> {
    if (claims.length) await q.interrupt(claims)
  }

  async rowStates(IDs: string[]): Promise<RowState[]> {
    return ((await q.rowStates(IDs)) as Record<string, unknown>[]).map(rowState)
  }

  async reindex(claim: Claim, index: ClaimIndex): Promise<boolean> {
    return Number(await q.reindex(claim, index)) === 1
  }

  async stillClaimed(claims: Claim[]): Promise<Set<string>> {
    const held = new Set<string>()
    for (const group of groupBy(claims, c => `${c.claimedBy} ${c.claimedAt}`).values()) {
      for (const { ID } of (await q.stillClaimed(group)) as { ID: string }[]) held.add(ID)
    }
    return held
  }

  /**
   * In a transaction of its own from the pool: CAP offers no connection outside it (the native store renews on one of
   * its own on PostgreSQL), so a renewal waits like any transaction when the handler slots hold every pooled one.
   */
  renewAll(claims: Claim[], until: number): Promise<Set<string>> {
    return inOwnTransaction(async () => {
      const renewed = Number(await q.renew(claims, until, clock.now()))
      // No RETURNING in CQL: when some were lost, read back which are still held (the UPDATE holds their locks).
      if (renewed === claims.length) return new Set(claims.map(c => c.ID))
      if (renewed === 0) return new Set<string>()
      return new Set(((await q.stillClaimed(claims)) as { ID: string }[]).map(r => r.ID))
    })
  }

  /** Nothing of its own to close: every statement runs on CAP's pooled connections. */
  async close(): Promise<void> {}

  /** On SQLite with the native dialect's statement: CQL has no way to take a lock without a row. */
  lockOnBegin(): void {
    lockWhenBegun(this.indexes)
  }

  async promoteNext(keys: (string | null | undefined)[]): Promise<void> {
    const distinct = distinctKeys(keys)
    if (distinct.length) await q.unpark(this.own, distinct)
  }

  async reconcile(limits: AttemptLimits, now: number, timeout: number): Promise<number> {
    let changed = Number(await q.unpark(this.own))
    changed += await this.reconciling(q.resurrectable(this.own, limits), () => q.resurrect(now))
    changed += await this.reconciling(q.releasedByOthers(this.own), () => q.unclaim(now))
    const stale = (r: { lastAttemptTimestamp: unknown }) => r.lastAttemptTimestamp !== null && millis(r.lastAttemptTimestamp) < now - timeout
    changed += await this.reconciling(q.foreignClaims(this.own), r => q.observe(now, stale(r) ? now : now + timeout))
    // Old rows appear while CAP's runners of older versions still write during an upgrade: look again now and then.
    this.oldRowsLeft = !!this.old
    return changed
  }

  /** Nothing to park: keyed rows stay in the claim's range, which checks each candidate's key. */
  async park(): Promise<Parked> {
    return { parked: 0, more: false }
  }

  /** Updates the rows `where` selects, each with what `set` gives it (rows alike together, a chunk of IDs at a time). */
  private async reconciling(where: Cqn, set: (row: { lastAttemptTimestamp: unknown }) => Record<string, unknown>): Promise<number> {
    let changed = 0
    const rows = (await q.lockedIDs(where)) as { ID: string; lastAttemptTimestamp: unknown }[]
    for (const [json, group] of groupBy(rows, r => JSON.stringify(set(r)))) {
      for (let i = 0; i < group.length; i += q.RECONCILE_CHUNK) {
        const IDs = group.slice(i, i + q.RECONCILE_CHUNK).map(r => r.ID)
        changed += Number(await q.updateRows(IDs, where, JSON.parse(json) as Record<string, unknown>))
      }
    }
    return changed
  }

  async claimsOf(owners: string[]): Promise<Claim[]> {
    const rows = (await q.claimsOf(owners)) as { ID: string; claimedBy: string; claimedAt: unknown }[]
    return rows.map(r => ({ ID: r.ID, claimedBy: r.claimedBy, claimedAt: millis(r.claimedAt) }))
  }

  async nextDue(after: number, skipTargets: string[] = []): Promise<number | undefined> {
    const [row] = (await q.nextDue(this.own, after, skipTargets)) as { dueAt: unknown }[]
    const next = millis(row?.dueAt)
    return Number.isNaN(next) ? undefined : next
  }

  /** See `QueueStore.queueStatistics`: three grouped counts (CQL has no conditional aggregate to do it in one). */
  async queueStatistics(limits: AttemptLimits, now: number): Promise<QueueSnapshot[]> {
    type Counted = { target: string; status?: string | null; count: unknown }
    const alive = (await q.aliveByState(this.own, limits)) as Counted[]
    const dead = (await q.deadByQueue(this.own, limits)) as Counted[]
    const oldest = (await q.oldestDue(this.own, limits, now)) as { target: string; oldest: unknown }[]
    const queues = new Map<string, QueueSnapshot>()
    const of = (queue: string) => queues.get(queue) ?? queues.set(queue, { queue, pending: 0, processing: 0, dead: 0, relayLag: 0 }).get(queue)!
    for (const r of alive) {
      const snapshot = of(r.target)
      if (r.status === null || r.status === undefined) snapshot.pending += Number(r.count)
      else if (r.status === PROCESSING) snapshot.processing += Number(r.count)
    }
    for (const r of dead) of(r.target).dead += Number(r.count)
    for (const r of oldest) {
      const due = millis(r.oldest)
      if (!Number.isNaN(due)) of(r.target).relayLag = Math.max(0, Math.floor((now - due) / 1000))
    }
    return [...queues.values()]
  }

  /**
   * See `QueueStore.deleteExpiredDeadLetters`: the rows are locked as they are read (skipping rows others hold), then
   * deleted by ID under the same condition. No RETURNING in CQL: if fewer went than were read (a row changed in
   * between, where the database has no row locks), those still there are left out of what it reports.
   */
  async deleteExpiredDeadLetters(limits: AttemptLimits, retentions: Retentions, now: number, limit: number): Promise<DeletedMessage[]> {
    const expired = expiredCqn(retentions, now)
    if (!expired) return []
    const doomed = q.expiredDeadLetters(this.own, limits, expired)
    const rows = (await q.doomedRows(doomed, limit)) as DeletedMessage[]
    if (rows.length === 0) return []
    const IDs = rows.map(r => r.ID)
    const deleted = Number(await q.deleteDoomed(IDs, doomed))
    if (deleted === rows.length) return rows
    const left = new Set(((await q.existing(IDs)) as { ID: string }[]).map(r => r.ID))
    return rows.filter(r => !left.has(r.ID))
  }

  async ping(): Promise<void> {
    await q.ping()
  }

  /** See `Numbering.nextSequence`: the key's counter incremented, or created (see `incrementOrInsert`), then read. */
  async nextSequence(orderingKey: string): Promise<number> {
    const appid = this.appid ?? null
    await incrementOrInsert(() => q.incrementSequence(appid, orderingKey), () => q.insertSequence(appid, orderingKey))
    const row = (await q.currentSequence(appid, orderingKey)) as { issued: unknown }
    return Number(row.issued)
  }

  async assignSequence(ID: string, sequence: number): Promise<void> {
    await q.assignSequence(ID, sequence)
  }

  /** See `QueueStore.receive`: a redelivery counted, or the receipt inserted (see `incrementOrInsert`). */
  async receive(receipt: ReceiptRef, now: number): Promise<boolean> {
    return !(await incrementOrInsert(() => q.countRedelivery(receipt), () => q.insertReceived(receipt, now)))
  }

  async countRedelivery(receipt: ReceiptRef): Promise<boolean> {
    return Number(await q.countRedelivery(receipt)) > 0
  }

  /** See `QueueStore.tryLock`: CQL has no such locks. */
  async tryLock(): Promise<boolean> {
    return true
  }

  /**
   * On a database with a native dialect, the native store's indexes (the claims here filter and order by the same
   * columns); elsewhere they come with the deployed model (SAP HANA: db/hana.cds).
   */
  async ensureIndexes(): Promise<void> {
    const dialect = this.indexes
    if (!dialect) return
    const db = cds.db as unknown as { run(sql: string): Promise<unknown> }
    await ensureIndexes({
      indexNames: async () => new Set(((await db.run(dialect.indexesOf(TABLE))) as { name: string }[]).map(r => r.name.toLowerCase())),
      run: sql => db.run(sql)
    })
  }
}

/** The first of `candidates` (in due order) whose messages add up to at most `maxBytes`, and the first one anyway. */
function withinBytes(candidates: Candidate[], maxBytes: number): Candidate[] {
  let bytes = 0
  return candidates.filter((row, i) => (bytes += Number(row.size ?? 0)) <= maxBytes || i === 0)
}

/**
 * CQL has no upsert that increments: `increment` a row, or `insert` it where there is none; whether it existed. Two
 * transactions inserting the same row at once: the later INSERT fails on the key. On SAP HANA its transaction goes
 * on and increments the row the other one inserted; on PostgreSQL the failed statement aborts the transaction, which
 * fails (the native store, PostgreSQL's default, upserts instead).
 */
async function incrementOrInsert(increment: () => q.Query, insert: () => q.Query): Promise<boolean> {
  if (Number(await increment()) > 0) return true
  try {
    await insert()
    return false
  } catch (e) {
    if (Number(await increment()) > 0) return true
    throw e
  }
}

/** `message` with the millisecond `keyClock` gives it, if it has an ordering key. */
function ordered(message: NewMessage): NewMessage {
  const key = message.orderingKey
  if (key === undefined) return message
  const ms = Date.parse(message.timestamp)
  const at = keyClock.next(key, ms, clock.now())
  return at === ms ? message : { ...message, timestamp: new Date(at).toISOString().replace('Z', '0000Z') }
}
