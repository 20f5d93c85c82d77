import type { Claim, DeadOnArrival, NewMessage, ReceiptRef } from '../interfaces'
import { deadLetterRow, iso, newRow } from './rows'
import { UNNUMBERED } from './sequences'
import { BLOCKS_NOTHING, deadLettersCqn, DUE_SINCE, ENTITY, FOREIGN_CLAIM, underClaimsCqn, PARKED_AT, PROCESSING, UNCLAIMED, WAITING_MARK, type AttemptLimits, type ClaimIndex } from './rules'
import type { Described } from './statements'

/**
 * The CQL of every statement the portable store runs, one function each (statements.ts is the native store's SQL).
 * Only CAP's documented query API: SELECT (with `forUpdate({ ignoreLocked: true })` where the claim must skip rows
 * another transaction holds), INSERT, UPSERT, UPDATE, DELETE on `cds.outbox.Messages`, conditions as CQN.
 */

export type Cqn = { xpr: unknown[] }
/** A CQL query: awaiting it runs it in the current transaction (rows, or the number of rows changed). */
export type Query = PromiseLike<unknown>
const ref = (name: string) => ({ ref: [name] })
const val = (value: unknown) => ({ val: value })
const isNull = (column: string): Cqn => ({ xpr: [ref(column), 'is', 'null'] })
const notNull = (column: string): Cqn => ({ xpr: [ref(column), 'is', 'not', 'null'] })
const compare = (column: string, op: string, value: unknown): Cqn => ({ xpr: [ref(column), op, val(value)] })
const inList = (column: string, values: unknown[]): Cqn => ({ xpr: [ref(column), 'in', { list: values.map(val) }] })
/**
 * Ascending, nulls last, as the indexes are built: @cap-js/postgres sorts ascending with NULLS FIRST unless told,
 * which no index on these columns serves, so every claim would sort the whole backlog.
 */
export const ascending = (...columns: string[]): string[] =>
  // CQN order items ({ ref, sort, nulls }); CAP's types only know the string forms
  columns.map(column => ({ ref: [column], sort: 'asc', nulls: 'last' }) as unknown as string)
const all = (...terms: (Cqn | undefined)[]): Cqn => {
  const xpr: unknown[] = []
  for (const term of terms) if (term) xpr.push(...(xpr.length ? ['and'] : []), term)
  return { xpr }
}

/** A SELECT that can take row locks: `forUpdate({ ignoreLocked })` is in CAP's documentation, not yet in its types. */
interface Lockable {
  forUpdate(options: { ignoreLocked?: boolean; wait?: number }): Lockable
}
const skippingLocked = <T>(query: T): T => (query as unknown as Lockable).forUpdate({ ignoreLocked: true }) as unknown as T

/** The columns a claim reads: everything a MessageRow needs, and what the claim decides by. */
export const CLAIM_COLUMNS = ['ID', 'timestamp', 'target', 'msg', 'attempts', 'lastError', 'task', 'appid', 'claimedAt', 'claimedBy', 'status', 'orderingKey', 'interrupted', 'sequence']

/** A row as `claimedRows` reads it. */
export interface ClaimRow {
  ID: string
  timestamp: string
  target: string
  msg: string
  attempts: number | null
  lastError: string | null
  task: string | null
  appid: string | null
  claimedAt: string | null
  claimedBy: string | null
  status: string | null
  orderingKey: string | null
  interrupted: number | null
  sequence: unknown
}

/** A row as `candidates` reads it: what the claim decides by, and instead of the message its length. */
export interface Candidate extends Omit<ClaimRow, 'msg'> {
  size: number | null
}

/** The columns of a candidate: the claim's, the message's length instead of the message (see `Candidate`). */
const CANDIDATE_COLUMNS = [...CLAIM_COLUMNS.filter(c => c !== 'msg'), 'length(msg) as size']

const outer = (column: string) => ({ ref: ['r', column] })
const inner = (column: string) => ({ ref: ['e', column] })

/**
 * Whether row `r` may be claimed as far as its ordering key goes (the native claim's `keyIsFree`): it is unordered,
 * or it is the first of its key and no other row of its key runs under a lease still valid at `now`. First as the
 * native store's `firstOfKey` orders a key: the rows a claim numbered by their numbers, before the unnumbered ones by
 * timestamp, then ID (compared by the database at its own precision). Correlated subqueries on the rows `e` of this app (`own`).
 */
function keyIsFree(own: Cqn, now: string): Cqn {
  const sameKey = { xpr: [inner('orderingKey'), '=', outer('orderingKey')] }
  // a literal, as in the partial index of numbered rows (see NUMBERED)
  const numbered = (column: unknown) => ({ xpr: [column, '>', { val: UNNUMBERED, param: false }] })
  const unnumbered = { xpr: [{ func: 'coalesce', args: [outer('sequence'), val(UNNUMBERED)] }, '=', val(UNNUMBERED)] }
  // two probes, each ordered by an index of the key: an OR of both in one would read all of the key's rows
  const numberedBefore = { xpr: [numbered(inner('sequence')), 'and', { xpr: [unnumbered, 'or', inner('sequence'), '<', outer('sequence')] }] }
  const stampedBefore = { xpr: [inner('timestamp'), '<', outer('timestamp'), 'or', { xpr: [inner('timestamp'), '=', outer('timestamp'), 'and', inner('ID'), '<', outer('ID')] }] }
  const earlier = (condition: Cqn) => SELECT.from(`${ENTITY} as e`).columns('ID').where(all(sameKey, own, condition))
  const running = SELECT.from(`${ENTITY} as e`).columns('ID')
    .where(all(sameKey, own, compare('status', '=', PROCESSING), compare('dueAt', '>', now), { xpr: [inner('ID'), '<>', outer('ID')] }))
  return {
    xpr: [outer('orderingKey'), 'is', 'null', 'or', {
      xpr: ['not', 'exists', earlier(numberedBefore), 'and', { xpr: [numbered(outer('sequence')), 'or', 'not', 'exists', earlier(stampedBefore)] },
        'and', 'not', 'exists', running]
    }]
  }
}

/**
 * Due rows of this app (`own`) a claim may take, oldest due first, without their messages (see `Candidate`), those of
 * a busy ordering key left out, locked for this transaction; rows another transaction holds locked (a claim in
 * progress elsewhere) are skipped, not waited for. A row another runner set to 'processing' without a claim of this
 * plugin is left alone until the reconciliation gave it a lease of its own. `ownE`: this app's rows, for the key checks.
 */
/** What a claim leaves out: the queues `targets`, and the rows of the services `services` (rows naming none are taken). */
export interface Skip {
  targets: string[]
  services: string[]
}

export function candidates(own: Cqn, ownE: Cqn, claimedAt: string, limit: number, { targets, services }: Skip): Query {
  const claimable = { xpr: [isNull('status'), 'or', notNull('claimedBy')] }
  const skipTargets = targets.length ? { xpr: [outer('target'), 'not', 'in', { list: targets.map(val) }] } : undefined
  const skipServices = services.length ? { xpr: [outer('service'), 'is', 'null', 'or', outer('service'), 'not', 'in', { list: services.map(val) }] } : undefined
  const where = all(own, compare('dueAt', '<=', claimedAt), claimable, skipTargets, skipServices, keyIsFree(ownE, claimedAt))
  return skippingLocked(SELECT.from(`${ENTITY} as r`).columns(...CANDIDATE_COLUMNS).where(where).orderBy(...ascending('dueAt')).limit(limit))
}

/** The candidates `IDs` whose ordering key is still free, in a statement of its own (it sees what committed since). */
export function stillFree(IDs: string[], ownE: Cqn, claimedAt: string): Query {
  return SELECT.from(`${ENTITY} as r`).columns('ID').where(all(inList('ID', IDs), keyIsFree(ownE, claimedAt)))
}

/** Up to `limit` due, unclaimed rows of the ordering keys `keys` (of this app). */
export function dueRowsOfKeys(own: Cqn, keys: string[], claimedAt: string, limit: number): Query {
  return SELECT.from(ENTITY).columns('ID', 'orderingKey')
    .where(all(own, inList('orderingKey', keys), isNull('status'), compare('dueAt', '<=', claimedAt))).limit(limit)
}

/** Locks the rows `IDs` that are still unclaimed, skipping those another transaction holds: the IDs it locked. */
export function lockUnclaimed(IDs: string[]): Query {
  return skippingLocked(SELECT.from(ENTITY).columns('ID').where(all(inList('ID', IDs), isNull('status'))))
}

/** The first `window` due, unclaimed rows of ordering key `key`, in key order; `lock`: locked, skipping rows others hold. */
export function firstRowsOfKey(own: Cqn, key: string, claimedAt: string, window: number, lock: boolean): Query {
  const query = SELECT.from(ENTITY).columns('ID')
    .where(all(own, compare('orderingKey', '=', key), isNull('status'), compare('dueAt', '<=', claimedAt)))
    .orderBy(...ascending('timestamp', 'ID')).limit(window)
  return lock ? skippingLocked(query) : query
}

/** Claims rows that were unclaimed (`status` null) for `owner`, each only if it still is and is due. */
export function claimFresh(IDs: string[], owner: string, claimedAt: string, leaseUntil: number): Query {
  return UPDATE(ENTITY)
    .set({ status: PROCESSING, claimedBy: owner, claimedAt, dueAt: iso(leaseUntil), lastAttemptTimestamp: claimedAt })
    .where(all(inList('ID', IDs), isNull('status'), compare('dueAt', '<=', claimedAt)))
}

/**
 * What claiming a row whose lease expired (`status` still 'processing') writes beyond the claim, as the native claim
 * does: the interruption is counted, and from the second one on it counts as an attempt, with `lastError` saying whose
 * it was (the first is free: a process holds more than it runs; the row then runs alone).
 */
function expiredClaim(row: Candidate): { attempts: number; lastError: string | null; interrupted: number } {
  const interrupted = Number(row.interrupted ?? 0)
  const attempts = Number(row.attempts ?? 0)
  if (interrupted === 0) return { attempts, lastError: row.lastError, interrupted: 1 }
  return { attempts: attempts + 1, lastError: `Lease expired: ${row.claimedBy ?? 'a process'} did not finish its attempt`, interrupted: interrupted + 1 }
}

/** Claims a row whose previous lease expired (see `expiredClaim`), only if it still is in the state read. */
export function claimExpired(row: Candidate, owner: string, claimedAt: string, leaseUntil: number): Query {
  return UPDATE(ENTITY)
    .set({ status: PROCESSING, claimedBy: owner, claimedAt, dueAt: iso(leaseUntil), lastAttemptTimestamp: claimedAt, ...expiredClaim(row) })
    .where(all(compare('ID', '=', row.ID), compare('status', '=', PROCESSING), compare('claimedBy', '=', row.claimedBy), compare('dueAt', '<=', claimedAt)))
}

/** The rows `IDs` as the claim of `owner` at `claimedAt` took them, in enqueue order. */
export function claimedRows(owner: string, claimedAt: string, IDs: string[]): Query {
  return SELECT.from(ENTITY).columns(...CLAIM_COLUMNS).where(all(compare('claimedBy', '=', owner), compare('claimedAt', '=', claimedAt), inList('ID', IDs))).orderBy(...ascending('timestamp'))
}

export function insert(message: NewMessage, appid: string | null, claim?: Claim, leaseUntil?: number): Query {
  return INSERT.into(ENTITY).entries(newRow(message, appid, claim, leaseUntil))
}

/** A new message that is a dead letter from the start (see `deadLetterRow`). */
export function insertDeadLetter(message: NewMessage, appid: string | null, dead: DeadOnArrival): Query {
  return INSERT.into(ENTITY).entries(deadLetterRow(message, appid, dead))
}

/** A task's row: new, or replaced (payload, timing, queue) with its failure state and claim reset. */
export function upsertTask(message: NewMessage, appid: string | null): Query {
  return UPSERT.into(ENTITY).entries({ ...newRow(message, appid), attempts: 0, lastError: null, ...UNCLAIMED.cqn })
}

export function deleteRow(ID: string): Query {
  return DELETE.from(ENTITY).where({ ID })
}

/** Which of the rows `IDs` are this app's (`own`) task `task`, with what tells their service (see `serviceOfTask`). */
export function taskRows(IDs: string[], task: string, own: Cqn): Query {
  return SELECT.from(ENTITY).columns('ID', 'service', 'msg', 'target').where(all(inList('ID', IDs), compare('task', '=', task), own))
}

/** Deletes the rows `IDs` if they are this app's (`own`) task `task`. */
export function deleteTask(IDs: string[], task: string, own: Cqn): Query {
  return DELETE.from(ENTITY).where(all(inList('ID', IDs), compare('task', '=', task), own))
}

/** Deletes processed rows, while their claims hold them. */
export function complete(claims: Claim[]): Query {
  return DELETE.from(ENTITY).where(underClaimsCqn(claims))
}

/** `column`, or `value` where it is null. */
const coalesce = (column: string, value: string | undefined) => ({ func: 'coalesce', args: [ref(column), val(value ?? null)] })

/** An UPDATE of claimed rows, only while `claims` still hold them. */
function whileClaimed(set: Record<string, unknown>, claims: Claim[]): Query {
  return UPDATE(ENTITY).set(set).where(underClaimsCqn(claims))
}

/** Counts an interruption of `claims` now, for the one their takeover will find (see `expiredClaim`). */
export function interrupt(claims: Claim[]): Query {
  return whileClaimed({ interrupted: { xpr: [ref('interrupted'), '+', val(1)] } }, claims)
}

/** Hands claimed rows back unprocessed, due at `dueAt`; `alone`: counted as interrupted, so they run alone. */
export function release(claims: Claim[], dueAt: Date, alone = false): Query {
  const interrupted = alone ? { interrupted: { xpr: [ref('interrupted'), '+', val(1)] } } : {}
  return whileClaimed({ ...UNCLAIMED.cqn, dueAt: iso(dueAt), ...interrupted }, claims)
}

/** Hands a claimed row back without an attempt (its broker is away), recording its service and event where it has none. */
export function waitForBroker(claim: Claim, dueAt: Date, lastError: string, described: Described): Query {
  return whileClaimed({ ...UNCLAIMED.cqn, dueAt: iso(dueAt), lastError, service: coalesce('service', described.service), event: coalesce('event', described.event) }, [claim])
}

/** Clears the waiting marks of `service`'s pending rows (its broker is back). */
export function clearWaitingMarks(own: Cqn, service: string): Query {
  return UPDATE(ENTITY).set({ lastError: null }).where(all(own, compare('service', '=', service), isNull('status'), { xpr: [ref('lastError'), 'like', val(`${WAITING_MARK}%`)] }))
}

/** Moves a completed occurrence of a recurring task to its next one. */
export function recur(claim: Claim, timestamp: string, dueAt: Date): Query {
  return whileClaimed({ ...UNCLAIMED.cqn, attempts: 0, lastError: null, timestamp, dueAt: iso(dueAt) }, [claim])
}

/**
 * A failed attempt: due again at `dueAt`, or a dead letter (`dueAt` null); `leaveKey` clears its ordering key. Rows
 * written by others get the service and event of their message (`described`) where theirs are empty.
 */
export function fail(claim: Claim, attempts: number, lastError: string | null, dueAt: Date | null, now: number, leaveKey: boolean, described: Described): Query {
  const set: Record<string, unknown> = {
    // a failure the handler reported: the message ran to an end, so it runs in batches again
    ...UNCLAIMED.cqn, attempts, lastError, lastAttemptTimestamp: iso(now), dueAt: dueAt && iso(dueAt), interrupted: 0,
    service: coalesce('service', described.service), event: coalesce('event', described.event)
  }
  if (leaveKey) set.orderingKey = null
  return whileClaimed(set, [claim])
}

/** Moves the leases of `claims` to `until`; `lastAttemptTimestamp` follows, so CAP's runner sees the row held. */
export function renew(claims: Claim[], until: number, now: number): Query {
  return whileClaimed({ dueAt: iso(until), lastAttemptTimestamp: iso(now) }, claims)
}

/** CAP's columns and the claim of the rows `IDs` (see `RowState`). */
export function rowStates(IDs: string[]): Query {
  return SELECT.from(ENTITY).columns('ID', 'status', 'attempts', 'lastError', 'lastAttemptTimestamp', 'timestamp', 'claimedBy', 'claimedAt').where(inList('ID', IDs))
}

/** The claim's index of a row `claim` holds, as `index` says (the claim gives the row up). */
export function reindex(claim: Claim, { claimedBy, claimedAt, dueAt }: ClaimIndex): Query {
  return whileClaimed({ claimedBy, claimedAt: claimedAt === null ? null : iso(claimedAt), dueAt: iso(dueAt) }, [claim])
}

/** The IDs of `claims` their claim still holds. */
export function stillClaimed(claims: Claim[]): Query {
  return SELECT.from(ENTITY).columns('ID').where(underClaimsCqn(claims))
}

export function taskTimestamp(ID: string): Query {
  return SELECT.one.from(ENTITY).columns('timestamp').where({ ID })
}

/**
 * The next due time of this app's rows, of queues other than `skipTargets`, after `after`: the first row in the order
 * of the claim's index.
 */
export function nextDue(own: Cqn, after: number, skipTargets: string[]): Query {
  const skip = skipTargets.length ? { xpr: [ref('target'), 'not', 'in', { list: skipTargets.map(val) }] } : undefined
  return SELECT.from(ENTITY)
    .columns('dueAt')
    .where(all(own, compare('dueAt', '>', iso(after)), compare('dueAt', '<', PARKED_AT), skip))
    .orderBy(...ascending('dueAt'))
    .limit(1)
}

/**
 * Rows the native store parked behind their key (`PARKED`) due at their `timestamp` again, of the keys `keys` or
 * of all: the portable claim keeps each key's order itself, so nothing needs to wait out of its range.
 */
export function unpark(own: Cqn, keys?: string[]): Query {
  return UPDATE(ENTITY)
    .with({ dueAt: ref('timestamp') })
    .where(all(compare('dueAt', '=', PARKED_AT), own, keys ? inList('orderingKey', keys) : undefined))
}

/** Rows claimed in the names `owners` (a process's claims and its claims at enqueue). */
export function claimsOf(owners: string[]): Query {
  return SELECT.from(ENTITY).columns('ID', 'claimedBy', 'claimedAt').where(all(inList('claimedBy', owners), compare('status', '=', PROCESSING)))
}

/**
 * Reconciliation (see `NativeStore.reconcile`): each step selects its rows as the claim does (rows another runner holds
 * locked are skipped, not waited for), then updates them by ID under the same condition, a chunk of IDs at a time.
 * The SELECT has no LIMIT: with one, PostgreSQL walks the due-time index through every dead letter instead of using
 * the reconciliation's own indexes (lib/store/indexes.ts), and usually there is nothing to find.
 */
export const RECONCILE_CHUNK = 500

/** Dead letters whose attempts are below their queue's limit again (CAP's recipe revives with `attempts = 0`). */
export const resurrectable = (own: Cqn, limits: AttemptLimits): Cqn => all(isNull('dueAt'), isNull('status'), own, deadLettersCqn(limits, false))
/** Rows another writer released (`status` null) while this plugin's columns still name a claim. */
export const releasedByOthers = (own: Cqn): Cqn => all(isNull('status'), notNull('claimedBy'), own)
/** Rows another runner holds ('processing', no claim of this plugin). */
export const foreignClaims = (own: Cqn): Cqn => all(notNull('status'), isNull('claimedBy'), own)

export function lockedIDs(where: Cqn): Query {
  return skippingLocked(SELECT.from(ENTITY).columns('ID', 'lastAttemptTimestamp').where(where))
}

export function updateRows(IDs: string[], where: Cqn, set: Record<string, unknown>): Query {
  return UPDATE(ENTITY).set(set).where(all(inList('ID', IDs), where))
}

export const resurrect = (now: number) => ({ dueAt: iso(now) })
export const unclaim = (now: number) => ({ ...UNCLAIMED.cqn, dueAt: iso(now) })
/** A foreign claim is left alone for `timeout`, or due at once when its last attempt is older than that (CAP's own rule). */
export const observe = (now: number, dueAt: number) => ({ claimedBy: FOREIGN_CLAIM, claimedAt: iso(now), dueAt: iso(dueAt) })

/** The messages of `service` that are no dead letters. */
export function aliveOf(own: Cqn, service: string, limits: AttemptLimits): Query {
  return SELECT.one.from(ENTITY).columns('count(1) as count').where(all(own, compare('service', '=', service), deadLettersCqn(limits, false)))
}

/** Messages of this app per queue and `status` that are no dead letters: pending (status null) and processing. */
export function aliveByState(own: Cqn, limits: AttemptLimits): Query {
  return SELECT.from(ENTITY).columns('target', 'status', 'count(1) as count').where(all(own, deadLettersCqn(limits, false))).groupBy('target', 'status')
}

/** Dead letters of this app per queue. */
export function deadByQueue(own: Cqn, limits: AttemptLimits): Query {
  return SELECT.from(ENTITY).columns('target', 'count(1) as count').where(all(own, deadLettersCqn(limits))).groupBy('target')
}

/**
 * Per queue, since when its oldest pending message is due at `now` (delayed messages carry their due time in
 * `timestamp`; a revived one is due from its revive: `DUE_SINCE`).
 */
export function oldestDue(own: Cqn, limits: AttemptLimits, now: number): Query {
  return SELECT.from(ENTITY)
    .columns('target', `min(${DUE_SINCE}) as oldest`)
    .where(all(own, isNull('status'), compare('timestamp', '<=', iso(now)), deadLettersCqn(limits, false)))
    .groupBy('target')
}

/** Up to `limit` rows `doomed` selects (`expiredDeadLetters`), locked; rows others hold are skipped, not waited for. */
export function doomedRows(doomed: Cqn, limit: number): Query {
  return skippingLocked(SELECT.from(ENTITY).columns('ID', 'target', 'service', 'event').where(doomed).limit(limit))
}

/** Deletes the rows `IDs` that `doomed` still selects. */
export function deleteDoomed(IDs: string[], doomed: Cqn): Query {
  return DELETE.from(ENTITY).where(all(inList('ID', IDs), doomed))
}

/** Rows that still exist of `IDs`. */
export function existing(IDs: string[]): Query {
  return SELECT.from(ENTITY).columns('ID').where(inList('ID', IDs))
}

/** The counters of the ordering keys' sequence numbers (db/consumer.cds); `appid` '' for none. */
const SEQUENCES = 'cds.outbox.KeySequences'
const sequenceOf = (appid: string | null, orderingKey: string) => ({ appid: appid ?? '', orderingKey })

/** Increments the counter of a key (locking it until the transaction ends); 0 rows if the key has none yet. */
export function incrementSequence(appid: string | null, orderingKey: string): Query {
  return UPDATE(SEQUENCES).set({ issued: { '+=': 1 } }).where(sequenceOf(appid, orderingKey))
}

/** The first counter of a key, at 1. */
export function insertSequence(appid: string | null, orderingKey: string): Query {
  return INSERT.into(SEQUENCES).entries({ ...sequenceOf(appid, orderingKey), issued: 1 })
}

/** The number a key's counter holds. */
export function currentSequence(appid: string | null, orderingKey: string): Query {
  return SELECT.one.from(SEQUENCES).columns('issued').where(sequenceOf(appid, orderingKey))
}

/** The number `sequence` kept with the message `ID`, if no claim numbered it before. */
export function assignSequence(ID: string, sequence: number): Query {
  return UPDATE(ENTITY).set({ sequence }).where({ ID, sequence: UNNUMBERED })
}

/** What receivers record (db/consumer.cds). */
const RECEIPTS = 'cds.outbox.Receipts'

/** Counts a redelivery of a receipt; 0 rows when there is none yet. */
export function countRedelivery(receipt: ReceiptRef): Query {
  return UPDATE(RECEIPTS).set({ duplicates: { '+=': 1 } }).where(receipt)
}

/** An inbound message's receipt, not processed yet: it does not expire while the message waits in the inbox. */
export function insertReceived(receipt: ReceiptRef, now: number): Query {
  return INSERT.into(RECEIPTS).entries({ ...receipt, state: 'received', duplicates: 0, recordedAt: iso(now) })
}

/** Needs the database and the table, finds no row (no ID is null), through the primary key. */
export function ping(): Query {
  return SELECT.from(ENTITY).columns('ID').where(isNull('ID'))
}

/**
 * Dead letters of this app past their retention (`expired`): both CAP's columns and the claim's index mark them dead
 * (not due, no runner holds them), so a row being revived is not one; one that blocks its ordering key stays.
 */
export const expiredDeadLetters = (own: Cqn, limits: AttemptLimits, expired: Cqn): Cqn =>
  all(own, isNull('dueAt'), isNull('status'), BLOCKS_NOTHING.cqn, deadLettersCqn(limits), expired)
