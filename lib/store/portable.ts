import cds from '@sap/cds'
import { groupBy } from '../group-by'
import type { Claim, MessageRow, NewMessage } from '../interfaces'
import type { Dialect } from './dialect'
import { ensureIndexes } from './indexes'
import { iso, messageRow, millis } from './rows'
import { oldRowsCqn, ownRowsCqn, PROCESSING, serviceOfOldRow, TABLE, type AttemptLimits } from './rules'
import * as q from './portable-queries'
import type { ClaimRow, Cqn } from './portable-queries'
import type { QueueStore } from './queue-store'
import type { Described } from './statements'

/**
 * The portable store: the same statements as the native store (index.ts), in CQL through the current transaction,
 * so it runs on every database CAP runs on (SAP HANA, sql.js, SQLite and PostgreSQL too). What differs, and why:
 * - The claim is a locking SELECT (`forUpdate({ ignoreLocked: true })`: rows another claim holds are skipped) and
 *   UPDATEs by ID, each guarded by the state it read, so a database without row locks (SQLite) still never gives
 *   one row to two claims. The ordering-key checks read the keys' rows and decide in JS (see `keysFree`).
 * - No savepoints (CAP documents none), so no batches: the runner runs a transaction per message (queue-store.ts).
 * - No wake-up across processes: other instances find new messages by polling.
 * - Indexes: on SQLite and PostgreSQL (`indexes`) the runner creates the native store's; on SAP HANA they come with
 *   the model (db/hana.cds, `cds build --for hana`).
 */

/**
 * The rows of a key a claim locks beyond its own: a claim elsewhere that took a row of the key from an older snapshot
 * holds one of the first rows of the key as this claim sees them (it was the head in its snapshot; only rows
 * committed since, with earlier timestamps, can come before it), so locking the first few detects it.
 */
const KEY_LOCK_WINDOW = 8

/** Keyed messages enqueued in one millisecond get distinct milliseconds (see `ordered`): entries for the present only. */
const issuedPerKey = new Map<string, number>()

export class PortableStore implements QueueStore {
  private readonly own: Cqn
  private readonly old: Cqn | undefined
  private oldRowsLeft = true
  readonly listenStatement = undefined

  constructor(
    private readonly appid: string | undefined,
    /** The native dialect where the database has one: only to create the claim's indexes at start. */
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

  async upsertTask(message: NewMessage): Promise<void> {
    await q.upsertTask(message, this.appid ?? null)
  }

  async unschedule(ID: string): Promise<number> {
    return Number(await q.deleteRow(ID))
  }

  async claim(owner: string, now: number, leaseUntil: number, limit: number, skipTargets: string[] = []): Promise<MessageRow[]> {
    const claimedAt = iso(now)
    let rows = await this.claimFrom(this.own, owner, claimedAt, leaseUntil, limit, skipTargets)
    if (rows.length < limit && this.old && this.oldRowsLeft) {
      const old = await this.claimFrom(this.old, owner, claimedAt, leaseUntil, limit - rows.length, skipTargets)
      if (old.length === 0) this.oldRowsLeft = false
      rows = rows.concat(old)
    }
    return rows.sort((a, b) => a.timestamp - b.timestamp)
  }

  /** One claim over the rows `own` selects: lock the candidates, keep those their key allows, mark them claimed. */
  private async claimFrom(own: Cqn, owner: string, claimedAt: string, leaseUntil: number, limit: number, skipTargets: string[]): Promise<MessageRow[]> {
    const candidates = (await q.candidates(own, claimedAt, limit, skipTargets)) as ClaimRow[]
    if (candidates.length === 0) return []
    const free = await this.keysFree(candidates, millis(claimedAt))
    const taken = candidates.filter(r => r.orderingKey === null || r.orderingKey === undefined || free.has(r.ID))
    const fresh = taken.filter(r => r.status === null || r.status === undefined)
    const expired = taken.filter(r => r.status !== null && r.status !== undefined)
    let claimed = fresh.length ? Number(await q.claimFresh(fresh.map(r => r.ID), owner, claimedAt, leaseUntil)) : 0
    for (const row of expired) claimed += Number(await q.claimExpired(row, owner, claimedAt, leaseUntil))
    if (claimed === 0) return []
    // Every guard held (row locks, or nobody else wrote meanwhile): the rows as read, with the claim written.
    const rows = claimed === taken.length
      ? taken.map(r => asClaimed(r, owner, claimedAt))
      : ((await q.claimedRows(owner, claimedAt, taken.map(r => r.ID))) as ClaimRow[])
    return rows.map(r => this.messageRow(r))
  }

  /**
   * Which keyed candidates their ordering key lets run (the native claim's `keyIsFree`): the first row of the key (by
   * timestamp, then ID) while no other row of the key runs under a live lease and no other transaction holds one of
   * the key's first rows locked (a claim elsewhere deciding about the same key from another snapshot). The locks come
   * first, then a fresh read, so a claim elsewhere is seen either as a lock or, once committed, as a running row.
   */
  private async keysFree(candidates: ClaimRow[], now: number): Promise<Set<string>> {
    const keyed = candidates.filter(r => r.orderingKey !== null && r.orderingKey !== undefined)
    if (keyed.length === 0) return new Set()
    const keys = [...new Set(keyed.map(r => r.orderingKey as string))]
    type KeyRow = { ID: string; orderingKey: string; status: string | null; dueAt: string | null }
    const before = groupBy((await q.rowsOfKeys(this.own, keys)) as KeyRow[], r => r.orderingKey)
    const heads = keyed.filter(r => before.get(r.orderingKey as string)?.[0]?.ID === r.ID)
    if (heads.length === 0) return new Set()
    const window = heads.flatMap(r => (before.get(r.orderingKey as string) ?? []).slice(0, KEY_LOCK_WINDOW).map(e => e.ID))
    const lockable = new Set(((await q.lockRows(window)) as { ID: string }[]).map(r => r.ID))
    const after = groupBy((await q.rowsOfKeys(this.own, [...new Set(heads.map(r => r.orderingKey as string))])) as KeyRow[], r => r.orderingKey)
    const free = new Set<string>()
    for (const head of heads) {
      const rows = after.get(head.orderingKey as string) ?? []
      if (rows[0]?.ID !== head.ID) continue
      const running = rows.some(e => e.ID !== head.ID && e.status === PROCESSING && millis(e.dueAt) > now)
      const lockedElsewhere = rows.slice(0, KEY_LOCK_WINDOW).some(e => !lockable.has(e.ID))
      if (!running && !lockedElsewhere) free.add(head.ID)
    }
    return free
  }

  /** A claimed row for the runner; an old row without `appid` is for the service its target names (CAP 10's rule). */
  private messageRow(raw: ClaimRow): MessageRow {
    const { status: _s, claimedBy: _c, ...rest } = raw
    const row = messageRow({ ...rest, attempts: Number(raw.attempts ?? 0) })
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

  async release(claims: Claim[], dueAt?: Date): Promise<number> {
    let released = 0
    // One statement per claim: rows of one claim share owner and time (`heldByCqn`).
    for (const group of groupBy(claims, c => `${c.claimedBy} ${c.claimedAt}`).values()) {
      released += Number(await q.release(group, dueAt ?? new Date(group[0].claimedAt)))
    }
    return released
  }

  async renewAll(claims: Claim[], until: number): Promise<Set<string>> {
    const renewed = Number(await q.renew(claims, until, Date.now()))
    // No RETURNING in CQL: when some were lost, read back which are still held (the UPDATE holds their locks).
    if (renewed === claims.length) return new Set(claims.map(c => c.ID))
    if (renewed === 0) return new Set()
    return new Set(((await q.held(claims)) as { ID: string }[]).map(r => r.ID))
  }

  async reconcile(limits: AttemptLimits, now: number, timeout: number): Promise<number> {
    let changed = await this.reconciling(q.resurrectable(this.own, limits), () => q.resurrect(now))
    changed += await this.reconciling(q.releasedByOthers(this.own), () => q.unclaim(now))
    const stale = (r: { lastAttemptTimestamp: unknown }) => r.lastAttemptTimestamp !== null && millis(r.lastAttemptTimestamp) < now - timeout
    changed += await this.reconciling(q.foreignClaims(this.own), r => q.observe(now, stale(r) ? now : now + timeout))
    // Old rows appear while CAP's runners of older versions still write during an upgrade: look again now and then.
    this.oldRowsLeft = !!this.old
    return changed
  }

  /** Updates the rows `where` selects, chunk by chunk, each with what `set` gives it (rows alike are updated together). */
  private async reconciling(where: Cqn, set: (row: { lastAttemptTimestamp: unknown }) => Record<string, unknown>): Promise<number> {
    let changed = 0
    for (;;) {
      const rows = (await q.lockedIDs(where)) as { ID: string; lastAttemptTimestamp: unknown }[]
      for (const [json, group] of groupBy(rows, r => JSON.stringify(set(r)))) {
        changed += Number(await q.updateRows(group.map(r => r.ID), where, JSON.parse(json) as Record<string, unknown>))
      }
      if (rows.length < q.RECONCILE_CHUNK) return changed
    }
  }

  async claimsOf(owners: string[]): Promise<Claim[]> {
    const rows = (await q.claimsOf(owners)) as { ID: string; claimedBy: string; claimedAt: unknown }[]
    return rows.map(r => ({ ID: r.ID, claimedBy: r.claimedBy, claimedAt: millis(r.claimedAt) }))
  }

  async nextDue(after: number): Promise<number | undefined> {
    const row = (await q.nextDue(this.own, after)) as { dueAt: unknown } | undefined
    const next = millis(row?.dueAt)
    return Number.isNaN(next) ? undefined : next
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

/** A candidate row as the claim wrote it. */
function asClaimed(row: ClaimRow, owner: string, claimedAt: string): ClaimRow {
  if (row.status === null || row.status === undefined) return { ...row, status: PROCESSING, claimedBy: owner, claimedAt }
  const lastError = `Lease expired: ${row.claimedBy ?? 'a process'} did not finish its attempt`
  return { ...row, status: PROCESSING, claimedBy: owner, claimedAt, attempts: Number(row.attempts ?? 0) + 1, lastError }
}

/**
 * Keyed messages run in `timestamp` order, and some databases keep less of it through CQL than the codec writes
 * (@cap-js/sqlite stores milliseconds; the codec counts microseconds within one): a keyed message enqueued in the
 * same millisecond as the previous one of its key gets the next millisecond, so its order survives any precision.
 */
function ordered(message: NewMessage): NewMessage {
  const key = message.orderingKey
  if (key === undefined) return message
  const ms = Date.parse(message.timestamp)
  const now = Date.now()
  for (const [k, issued] of issuedPerKey) if (issued < now) issuedPerKey.delete(k)
  const last = issuedPerKey.get(key)
  const at = last !== undefined && ms <= last ? last + 1 : ms
  issuedPerKey.set(key, at)
  return at === ms ? message : { ...message, timestamp: new Date(at).toISOString().replace('Z', '0000Z') }
}
