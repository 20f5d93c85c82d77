import type { Claim, NewMessage, ReceiptRef } from '../interfaces'
import type { Dialect } from './dialect'
import { iso } from './rows'
import { initialSequence, NUMBERED, UNNUMBERED } from './sequences'
import { BLOCKS_NOTHING, deadLettersSql, DUE_SINCE, FOREIGN_CLAIM, NOT_DUE, PARKED, PROCESSING, TABLE, UNCLAIMED, WAITING_MARK, type AttemptLimits, type ClaimIndex, type Fragment } from './rules'

/** What the statements that change rows a subquery chose need of the dialect. */
type Locking = Pick<Dialect, 'skipLocked' | 'idIn'>

/**
 * The SQL text of every statement the queue runs, built from named fragments. Placeholders are `?`; the dialect
 * translates them. Each function returns the statement with its parameters.
 */

/** The columns a claim reads back; quoted aliases because PostgreSQL folds unquoted names to lower case. */
function claimedColumns(dialect: Dialect): string {
  const keyLock = dialect.keyLock ? `, ${dialect.keyLock('orderingKey')} AS "keyLocked"` : ''
  return 'ID as "ID", ' + dialect.isoText('timestamp') + ' as "timestamp", target as "target", msg as "msg", ' +
    'attempts as "attempts", lastError as "lastError", task as "task", appid as "appid", ' +
    dialect.isoText('claimedAt') + ' as "claimedAt", orderingKey AS "orderingKey", interrupted AS "interrupted", sequence AS "sequence"' + keyLock
}

/**
 * Rows `IDs` while the claim of `claimedBy` at `claimedAt` still holds them. The rows of one claim share owner and
 * time, so this guards one row's outcome as well as a whole slot's.
 */
export function underClaims(claims: Claim[]): Fragment {
  const { claimedBy, claimedAt } = claims[0]
  return {
    sql: `claimedBy = ? AND claimedAt = ? AND ID IN (${claims.map(() => '?').join(', ')})`,
    params: [claimedBy, iso(claimedAt), ...claims.map(c => c.ID)]
  }
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
 * The first row of ordering key `key` (an expression with its parameters) among the rows `alias` of this app (`own`),
 * its `ID`, `timestamp` and `sequence`: of the rows a claim numbered, the lowest number; of none, the earliest by
 * timestamp, then ID. A numbered row was claimed before the key's unnumbered ones and keeps its place when it is handed
 * back unstarted: one stamped earlier that committed after that claim comes after it, or its number would be higher
 * than one that ran later (chaos seed 119, issue 31). Two ordered probes of the key's indexes: a NOT EXISTS for an
 * earlier row reads as much, but PostgreSQL plans it as a scan of the table once most keyed rows share one key (a
 * backlog behind a failing head).
 */
function firstOfKey(key: Fragment, alias: string, own: Fragment): Fragment {
  const probe = (pos: number, numbered: string, order: string) => `SELECT * FROM (SELECT ${pos} AS pos, ${alias}.ID, ${alias}.timestamp, ${alias}.sequence
      FROM ${TABLE} ${alias} WHERE ${alias}.orderingKey = ${key.sql} AND ${own.sql}${numbered} ORDER BY ${order} LIMIT 1) ${alias}${pos}`
  return {
    sql: `SELECT ID, timestamp, sequence FROM (${probe(0, ` AND ${alias}.${NUMBERED}`, `${alias}.sequence`)}
      UNION ALL ${probe(1, '', `${alias}.timestamp, ${alias}.ID`)}) ranked ORDER BY pos LIMIT 1`,
    params: [...key.params, ...own.params, ...key.params, ...own.params]
  }
}

/** Row `r` is the first of its ordering key (see `firstOfKey`). */
function firstOfItsKey(ownE: Fragment): Fragment {
  const first = firstOfKey({ sql: 'r.orderingKey', params: [] }, 'e', ownE)
  return { sql: `r.ID = (SELECT ID FROM (${first.sql}) first)`, params: first.params }
}

/**
 * Whether row `r` may be claimed as far as its ordering key goes: it is unordered, or it is the first of its key and
 * no other row of its key runs under a live lease. The second condition covers a row with an earlier timestamp that
 * commits after a later one of its key was claimed: it waits until that one has finished.
 */
function keyIsFree(ownE: Fragment, now: string): Fragment {
  const running = runningOfKey(ownE, now)
  const first = firstOfItsKey(ownE)
  return {
    sql: `(r.orderingKey IS NULL OR (${first.sql} AND NOT EXISTS (${running.sql})))`,
    params: [...first.params, ...running.params]
  }
}

const INSERT_COLUMNS = 'ID, timestamp, target, msg, attempts, task, appid, dueAt, orderingKey, service, event, sequence'
const INSERT_VALUES = '?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?'

function insertParams(message: NewMessage, appid: string | null): unknown[] {
  const { ID, timestamp, target, msg, task, dueAt, orderingKey, service, event } = message
  return [ID, timestamp, target, msg, task ?? null, appid, iso(dueAt), orderingKey ?? null, service ?? null, event ?? null, initialSequence(orderingKey)]
}

export function insert(message: NewMessage, appid: string | null): Fragment {
  return { sql: `INSERT INTO ${TABLE} (${INSERT_COLUMNS}) VALUES (${INSERT_VALUES})`, params: insertParams(message, appid) }
}

/** A new message with an ordering key: parked (`PARKED`) if an earlier message of its key is in the table. */
export function insertKeyed(dialect: Dialect, message: NewMessage & { orderingKey: string }, appid: string | null, ownE: Fragment): Fragment {
  const { ID, timestamp, target, msg, task, dueAt, orderingKey, service, event } = message
  const first = firstOfKey({ sql: '?', params: [orderingKey] }, 'e', ownE)
  const earlier = `EXISTS (SELECT 1 FROM (${first.sql}) first WHERE first.${NUMBERED} OR first.timestamp < ? OR (first.timestamp = ? AND first.ID < ?))`
  const due = `CASE WHEN ${earlier} THEN ${dialect.timestamp(PARKED)} ELSE ${dialect.timestamp('?')} END`
  return {
    sql: `INSERT INTO ${TABLE} (${INSERT_COLUMNS}) VALUES (?, ?, ?, ?, 0, ?, ?, ${due}, ?, ?, ?, ?)`,
    params: [ID, timestamp, target, msg, task ?? null, appid, ...first.params, timestamp, timestamp, ID, iso(dueAt), orderingKey, service ?? null, event ?? null, initialSequence(orderingKey)]
  }
}

/**
 * The first message of each of `keys` (by timestamp, then ID) becomes due at its `timestamp` if it was parked:
 * run where a row of the key is done (deleted, or a dead letter leaving its key), in the same transaction.
 */
export function promoteNext(keys: string[], ownF: Fragment): Fragment {
  const firsts = keys.map(key => firstOfKey({ sql: '?', params: [key] }, 'f', ownF))
  return {
    sql: `UPDATE ${TABLE} SET dueAt = timestamp WHERE dueAt = ${PARKED} AND (${firsts.map(first => `ID = (SELECT ID FROM (${first.sql}) first)`).join(' OR ')})`,
    params: firsts.flatMap(first => first.params)
  }
}

/**
 * Reconciliation: parks messages others wrote (CAP's runner, scripts, CQL handlers on the table) behind an
 * earlier message of their key, at most `limit` (see `NativeStore.park`). Only rows never attempted: their due
 * time is their `timestamp`, which `promoteNext` restores.
 */
export function park(own: Fragment, ownE: Fragment, dialect: Locking, limit: number): Fragment {
  const first = firstOfItsKey(ownE)
  const parked = `SELECT r.ID FROM ${TABLE} r WHERE r.orderingKey IS NOT NULL
      AND r.dueAt < ${PARKED} AND r.status IS NULL AND r.attempts = 0 AND ${own.sql} AND NOT ${first.sql} LIMIT ? ${dialect.skipLocked}`
  return {
    sql: `UPDATE ${TABLE} SET dueAt = ${PARKED} WHERE ${dialect.idIn(parked)}`,
    params: [...own.params, ...first.params, limit]
  }
}

/**
 * Reconciliation: the keys of parked messages after `after` (at most `limit`, in key order, one index probe
 * each) with the first message of each key. Where that first message is itself parked, whatever made it the
 * first (its predecessor deleted by a script or CAP's runner, a completion that committed beside the enqueue of the
 * next message) was not seen by `promoteNext`.
 */
export function parkedKeys(ownP: Fragment, ownF: Fragment, after: string, limit: number): Fragment {
  const next = `SELECT MIN(p.orderingKey) FROM ${TABLE} p WHERE p.dueAt = ${PARKED} AND ${ownP.sql} AND p.orderingKey >`
  const first = firstOfKey({ sql: 'parked.k', params: [] }, 'f', ownF)
  return {
    sql: `WITH RECURSIVE parked (k, n) AS (
        SELECT (${next} ?), 1
        UNION ALL
        SELECT (${next} parked.k), parked.n + 1 FROM parked WHERE parked.k IS NOT NULL AND parked.n < ?)
      SELECT parked.k AS "key", (SELECT ID FROM (${first.sql}) first) AS "first"
      FROM parked WHERE parked.k IS NOT NULL`,
    params: [...ownP.params, after, ...ownP.params, limit, ...first.params]
  }
}

/** Parked rows `IDs` become due at their `timestamp`. */
export function unpark(IDs: string[]): Fragment {
  return { sql: `UPDATE ${TABLE} SET dueAt = timestamp WHERE dueAt = ${PARKED} AND ID IN (${IDs.map(() => '?').join(', ')})`, params: IDs }
}

/**
 * A new row already claimed by `claim` until `leaseUntil`; `lastAttemptTimestamp` is the claim's time, so CAP's
 * runner (which takes over 'processing' rows after its `timeout` from there) sees it held as well.
 */
export function insertClaimed(message: NewMessage, appid: string | null, claim: Claim, leaseUntil: number): Fragment {
  return {
    sql: `INSERT INTO ${TABLE} (${INSERT_COLUMNS}, status, claimedBy, claimedAt, lastAttemptTimestamp)
      VALUES (${INSERT_VALUES}, '${PROCESSING}', ?, ?, ?)`,
    params: [...insertParams({ ...message, dueAt: new Date(leaseUntil) }, appid), claim.claimedBy, iso(claim.claimedAt), iso(claim.claimedAt)]
  }
}

/** A task's row: new, or replaced (payload, timing, queue) with its failure state and claim reset. */
export function upsertTask(message: NewMessage, appid: string | null): Fragment {
  const row = insert(message, appid)
  return {
    sql: `${row.sql} ON CONFLICT (ID) DO UPDATE SET timestamp = excluded.timestamp, target = excluded.target,
      msg = excluded.msg, task = excluded.task, appid = excluded.appid, dueAt = excluded.dueAt, attempts = 0,
      service = excluded.service, event = excluded.event,
      lastError = NULL, ${UNCLAIMED.sql}`,
    params: row.params
  }
}

export function deleteRow(ID: string): Fragment {
  return { sql: `DELETE FROM ${TABLE} WHERE ID = ?`, params: [ID] }
}

/** Which of the rows `IDs` are this app's (`own`) task `task`, with what tells their service (see `serviceOfTask`). */
export function taskRows(IDs: string[], task: string, own: Fragment): Fragment {
  return {
    sql: `SELECT ID AS "ID", service AS "service", msg AS "msg", target AS "target" FROM ${TABLE}
      WHERE ID IN (${IDs.map(() => '?').join(', ')}) AND task = ? AND ${own.sql}`,
    params: [...IDs, task, ...own.params]
  }
}

/** The rows `IDs` only if they are this app's (`own`) task `task`: a row of another task or app with that ID stays. */
export function deleteTask(IDs: string[], task: string, own: Fragment): Fragment {
  return { sql: `DELETE FROM ${TABLE} WHERE ID IN (${IDs.map(() => '?').join(', ')}) AND task = ? AND ${own.sql}`, params: [...IDs, task, ...own.params] }
}

/**
 * Claims up to `limit` due rows of this app (`own`) for `owner`, skipping the queues in `skipTargets` and rows whose
 * ordering key is busy. A row another runner set to 'processing' without a claim of this plugin is left alone until
 * the reconciliation has given it a lease of its own (`NativeStore.reconcile`). `lastAttemptTimestamp` is the claim's
 * time, so CAP's runner sees the row held.
 *
 * The rows are taken in due order while their messages add up to at most `maxBytes`, the first one whatever its size,
 * so what a process reads of a backlog of large messages stays bounded (`maxClaimBytes`). The sizes come from
 * `octet_length`, which neither database answers by reading the message (SQLite reads the length from the record
 * header, PostgreSQL from the TOAST pointer); rows past the bound are locked until the claim commits, not claimed.
 *
 * A row whose lease expired (`status` still 'processing') was interrupted: its process died or gave up on it. Only an
 * attempt that started may count, and a process holds more than it runs (a batch's rest, claims at enqueue), so the
 * first interruption is free; the row then runs alone, at once after its claim, and every further interruption counts
 * as an attempt — a message that kills its process every time still ends as a dead letter.
 */
export function claim(own: Fragment, ownE: Fragment, dialect: Locking, owner: string, claimedAt: string, leaseUntil: number, limit: number, skipTargets: string[], maxBytes = Number.MAX_SAFE_INTEGER, skipServices: string[] = []): Fragment {
  const free = keyIsFree(ownE, claimedAt)
  const list = (values: string[]) => values.map(() => '?').join(', ')
  // a row that names no service (written by others, not yet described) is taken: its attempt says whose it is
  const skip = (skipTargets.length ? `AND r.target NOT IN (${list(skipTargets)}) ` : '') +
    (skipServices.length ? `AND (r.service IS NULL OR r.service NOT IN (${list(skipServices)}))` : '')
  const candidates = `SELECT r.ID, r.dueAt, COALESCE(octet_length(r.msg), 0) AS size FROM ${TABLE} r
    WHERE ${own.sql} AND r.dueAt <= ? AND (r.status IS NULL OR r.claimedBy IS NOT NULL) ${skip} AND ${free.sql}
    ORDER BY r.dueAt LIMIT ? ${dialect.skipLocked}`
  // `upto`: the bytes of the candidates up to and including this one; the first one's is its own size
  const withinBytes = `SELECT w.ID FROM (SELECT c.ID, c.size, SUM(c.size) OVER (ORDER BY c.dueAt, c.ID) AS upto FROM (${candidates}) c) w
    WHERE w.upto <= ? OR w.upto = w.size`
  return {
    sql: `UPDATE ${TABLE} SET status = '${PROCESSING}', claimedBy = ?, claimedAt = ?, dueAt = ?, lastAttemptTimestamp = ?,
        attempts = attempts + CASE WHEN status = '${PROCESSING}' AND interrupted > 0 THEN 1 ELSE 0 END,
        lastError = CASE WHEN status = '${PROCESSING}' AND interrupted > 0
          THEN 'Lease expired: ' || COALESCE(claimedBy, 'a process') || ' did not finish its attempt' ELSE lastError END,
        interrupted = interrupted + CASE WHEN status = '${PROCESSING}' THEN 1 ELSE 0 END
      WHERE ${dialect.idIn(withinBytes)}`,
    params: [owner, claimedAt, iso(leaseUntil), claimedAt, ...own.params, claimedAt, ...skipTargets, ...skipServices, ...free.params, limit, maxBytes]
  }
}

/** The bytes of the messages a claim took (see `claim`), by its owner and time. */
export function claimedBytes(owner: string, claimedAt: string): Fragment {
  return { sql: `SELECT COALESCE(SUM(octet_length(msg)), 0) AS "bytes" FROM ${TABLE} WHERE claimedBy = ? AND claimedAt = ?`, params: [owner, claimedAt] }
}

/** The rows a claim took, by its owner and time, in enqueue order. */
export function claimedRows(dialect: Dialect, owner: string, claimedAt: string): Fragment {
  return { sql: `SELECT ${claimedColumns(dialect)} FROM ${TABLE} WHERE claimedBy = ? AND claimedAt = ? ORDER BY timestamp`, params: [owner, claimedAt] }
}

/** Rows of a claim whose ordering key runs elsewhere by now (see `Store.keysTakenMeanwhile`). */
export function keysRunningElsewhere(ownE: Fragment, owner: string, claimedAt: string): Fragment {
  const running = runningOfKey(ownE, claimedAt)
  return {
    sql: `SELECT r.ID AS "ID" FROM ${TABLE} r WHERE r.claimedBy = ? AND r.claimedAt = ? AND r.orderingKey IS NOT NULL
      AND EXISTS (${running.sql})`,
    params: [owner, claimedAt, ...running.params]
  }
}

/** An UPDATE of claimed rows, only while `claims` still hold them. */
function whileClaimed(set: string, params: unknown[], claims: Claim[]): Fragment {
  const held = underClaims(claims)
  return { sql: `UPDATE ${TABLE} SET ${set} WHERE ${held.sql}`, params: [...params, ...held.params] }
}

/** CAP's columns and the claim of the rows `IDs` (see `RowState`). */
export function rowStates(dialect: Dialect, IDs: string[]): Fragment {
  return {
    sql: `SELECT ID AS "ID", status AS "status", attempts AS "attempts", lastError AS "lastError",
        ${dialect.isoText('lastAttemptTimestamp')} AS "lastAttemptTimestamp", ${dialect.isoText('timestamp')} AS "timestamp",
        claimedBy AS "claimedBy", ${dialect.isoText('claimedAt')} AS "claimedAt"
      FROM ${TABLE} WHERE ID IN (${IDs.map(() => '?').join(', ')})`,
    params: IDs
  }
}

/** The claim's index of a row `claim` holds, as `index` says (the claim gives the row up). */
export function reindex(claim: Claim, index: ClaimIndex): Fragment {
  const { claimedBy, claimedAt, dueAt } = index
  return whileClaimed('claimedBy = ?, claimedAt = ?, dueAt = ?', [claimedBy, claimedAt === null ? null : iso(claimedAt), iso(dueAt)], [claim])
}

/** Counts an interruption of `claims` now, for the one their takeover will find (see `claim`). */
export function interrupt(claims: Claim[]): Fragment {
  return whileClaimed('interrupted = interrupted + 1', [], claims)
}

/** The IDs of `claims` (of one claim) still held. */
export function whichStillClaimed(claims: Claim[]): Fragment {
  const held = underClaims(claims)
  return { sql: `SELECT ID AS "ID" FROM ${TABLE} WHERE ${held.sql}`, params: held.params }
}

/** Hands claimed rows back unprocessed, due at `dueAt`. */
export function release(claims: Claim[], dueAt: Date, alone = false): Fragment {
  return whileClaimed(`${UNCLAIMED.sql}, dueAt = ?${alone ? ', interrupted = interrupted + 1' : ''}`, [iso(dueAt)], claims)
}

/** Hands a claimed row back without an attempt (its broker is away), marked, with its service and event where it has none. */
export function waitForBroker(claim: Claim, dueAt: Date, lastError: string, described: Described): Fragment {
  return whileClaimed(
    `${UNCLAIMED.sql}, dueAt = ?, lastError = ?, service = COALESCE(service, ?), event = COALESCE(event, ?)`,
    [iso(dueAt), lastError, described.service ?? null, described.event ?? null],
    [claim]
  )
}

/** Clears the waiting marks of `service`'s pending rows (its broker is back). */
export function clearWaitingMarks(own: Fragment, service: string): Fragment {
  return {
    sql: `UPDATE ${TABLE} SET lastError = NULL WHERE ${own.sql} AND service = ? AND status IS NULL AND lastError LIKE ?`,
    params: [...own.params, service, `${WAITING_MARK}%`]
  }
}

/** The messages of `service` that are no dead letters. */
export function aliveOf(own: Fragment, service: string, limits: AttemptLimits): Fragment {
  const alive = deadLettersSql(limits, false)
  return {
    sql: `SELECT COUNT(*) AS "count" FROM ${TABLE} WHERE ${own.sql} AND service = ? AND ${alive.sql}`,
    params: [...own.params, service, ...alive.params]
  }
}

/** Deletes processed rows, while their claims hold them. */
export function complete(claims: Claim[]): Fragment {
  const held = underClaims(claims)
  return { sql: `DELETE FROM ${TABLE} WHERE ${held.sql}`, params: held.params }
}

/** Moves a completed occurrence of a recurring task to its next one. */
export function recur(claim: Claim, timestamp: string, dueAt: Date): Fragment {
  return whileClaimed(`${UNCLAIMED.sql}, attempts = 0, lastError = NULL, timestamp = ?, dueAt = ?`, [timestamp, iso(dueAt)], [claim])
}

/**
 * A failed attempt: due again at `dueAt`, or a dead letter (`dueAt` null); `leaveKey` clears its ordering key. Rows
 * written by others get the service and event of their message (`described`) on the way.
 */
export function fail(claim: Claim, attempts: number, lastError: string | null, dueAt: Date | null, now: number, leaveKey: boolean, described: Described): Fragment {
  // a failure the handler reported: the message ran to an end, so it runs in batches again
  return whileClaimed(
    `${UNCLAIMED.sql}, attempts = ?, lastError = ?, lastAttemptTimestamp = ?, dueAt = ?, interrupted = 0,
      service = COALESCE(service, ?), event = COALESCE(event, ?)${leaveKey ? ', orderingKey = NULL' : ''}`,
    [attempts, lastError, iso(now), dueAt && iso(dueAt), described.service ?? null, described.event ?? null],
    [claim]
  )
}

/** The service and event of a message, as the table's `service` and `event` columns keep them. */
export interface Described {
  service?: string
  event?: string
}

/**
 * Moves the leases of `claims` to `until`, reading back the IDs still held; `lastAttemptTimestamp` follows, so CAP's
 * runner keeps seeing a long handler's row held.
 */
export function renew(claims: Claim[], until: number, now: number): Fragment {
  const update = whileClaimed('dueAt = ?, lastAttemptTimestamp = ?', [iso(until), iso(now)], claims)
  return { sql: `${update.sql} RETURNING ID AS "ID"`, params: update.params }
}

export function taskTimestamp(dialect: Dialect, ID: string): Fragment {
  return { sql: `SELECT ${dialect.isoText('timestamp')} AS "timestamp" FROM ${TABLE} WHERE ID = ?`, params: [ID] }
}

/**
 * When the next row of this app, of queues other than `skipTargets`, becomes due (or a lease expires) after `after`;
 * parked rows wait for their key.
 */
export function nextDue(dialect: Dialect, own: Fragment, after: number, skipTargets: string[]): Fragment {
  const skip = skipTargets.length ? ` AND target NOT IN (${skipTargets.map(() => '?').join(', ')})` : ''
  return {
    sql: `SELECT ${dialect.isoText('MIN(dueAt)')} AS "next" FROM ${TABLE} WHERE ${own.sql} AND dueAt > ? AND dueAt < ${PARKED}${skip}`,
    params: [...own.params, iso(after), ...skipTargets]
  }
}

/**
 * Reconciliation (see `NativeStore.reconcile`): dead letters whose attempts are below their queue's limit again (CAP's
 * recipe revives with `attempts = 0`; a raised `maxAttempts`) become due.
 */
export function resurrect(own: Fragment, limits: AttemptLimits, dialect: Locking, now: number): Fragment {
  const alive = deadLettersSql(limits, false)
  return reconciling('dueAt = ?', [iso(now)], { sql: `dueAt IS NULL AND status IS NULL AND ${own.sql} AND ${alive.sql}`, params: [...own.params, ...alive.params] }, dialect)
}

/**
 * The UPDATEs of the reconciliation take their rows as the claim does: rows another runner holds locked (CAP's
 * runner with legacyLocking keeps them locked while its handlers run) are skipped, not waited for.
 */
function reconciling(set: string, params: unknown[], where: Fragment, dialect: Locking): Fragment {
  return {
    sql: `UPDATE ${TABLE} SET ${set} WHERE ${dialect.idIn(`SELECT ID FROM ${TABLE} WHERE ${where.sql} ${dialect.skipLocked}`)}`,
    params: [...params, ...where.params]
  }
}

/** Reconciliation: rows another writer released (`status` null) while this plugin's columns still name a claim. */
export function releasedByOthers(own: Fragment, dialect: Locking, now: number): Fragment {
  return reconciling(`${UNCLAIMED.sql}, dueAt = ?`, [iso(now)], { sql: `status IS NULL AND claimedBy IS NOT NULL AND ${own.sql}`, params: own.params }, dialect)
}

/**
 * Reconciliation: rows another runner holds ('processing', no claim of this plugin) get a lease: left alone for
 * `timeout` (`expired: false`), or due at once when their `lastAttemptTimestamp` is older than that already
 * (`expired: true`, CAP's own rule). Two statements: a parameter as the value of a CASE has no type on PostgreSQL.
 */
export function observeForeignClaims(own: Fragment, dialect: Locking, now: number, timeout: number, expired: boolean): Fragment {
  const age = expired ? 'lastAttemptTimestamp IS NOT NULL AND lastAttemptTimestamp < ?' : '(lastAttemptTimestamp IS NULL OR lastAttemptTimestamp >= ?)'
  return reconciling(
    'claimedBy = ?, claimedAt = ?, dueAt = ?',
    [FOREIGN_CLAIM, iso(now), iso(expired ? now : now + timeout)],
    { sql: `status IS NOT NULL AND claimedBy IS NULL AND ${age} AND ${own.sql}`, params: [iso(now - timeout), ...own.params] },
    dialect
  )
}

/** Rows claimed in this process's name (its claims and its claims at enqueue), to compare with what it holds. */
export function claimsOf(dialect: Dialect, owners: string[]): Fragment {
  return {
    sql: `SELECT ID AS "ID", claimedBy AS "claimedBy", ${dialect.isoText('claimedAt')} AS "claimedAt" FROM ${TABLE}
      WHERE claimedBy IN (${owners.map(() => '?').join(', ')}) AND status = '${PROCESSING}'`,
    params: owners
  }
}

/**
 * Per queue of this app (`own`), in one pass over the table: pending, processing and dead messages, and when the
 * oldest pending message that is due at `now` was due (delayed messages carry their due time in `timestamp`; a
 * revived one is due from its revive: `DUE_SINCE`).
 */
export function queueStatistics(dialect: Dialect, own: Fragment, limits: AttemptLimits, now: number): Fragment {
  const dead = deadLettersSql(limits)
  const alive = deadLettersSql(limits, false)
  return {
    sql: `SELECT target AS "queue",
        SUM(CASE WHEN status IS NULL AND ${alive.sql} THEN 1 ELSE 0 END) AS "pending",
        SUM(CASE WHEN status = '${PROCESSING}' AND ${alive.sql} THEN 1 ELSE 0 END) AS "processing",
        SUM(CASE WHEN ${dead.sql} THEN 1 ELSE 0 END) AS "dead",
        ${dialect.isoText(`MIN(CASE WHEN status IS NULL AND timestamp <= ? AND ${alive.sql} THEN ${DUE_SINCE} END)`)} AS "oldestDue"
      FROM ${TABLE} WHERE ${own.sql} GROUP BY target`,
    params: [...alive.params, ...alive.params, ...dead.params, iso(now), ...alive.params, ...own.params]
  }
}

/**
 * Deletes up to `limit` of this app's dead letters past their queue's retention (`expired`), reading back what it
 * deleted. Rows another transaction holds (a revive in progress, another instance's cleanup) are skipped, not waited
 * for, only rows both CAP's columns and the claim's index mark as dead go (a row being revived is neither), and a
 * dead letter that blocks its ordering key stays (see `BLOCKS_NOTHING`). The
 * rows are chosen once, in a materialized CTE: PostgreSQL may evaluate `IN (SELECT … LIMIT n)` more than once in a
 * DELETE, and then deletes more than `limit` rows (measured: 880 of a batch of 500).
 */
export function deleteExpiredDeadLetters(own: Fragment, limits: AttemptLimits, expired: Fragment, dialect: Locking, limit: number): Fragment {
  const dead = deadLettersSql(limits)
  return {
    sql: `WITH doomed AS MATERIALIZED (SELECT ID FROM ${TABLE} WHERE ${own.sql} AND ${NOT_DUE.sql} AND status IS NULL
        AND ${BLOCKS_NOTHING.sql} AND ${dead.sql} AND ${expired.sql} LIMIT ? ${dialect.skipLocked})
      DELETE FROM ${TABLE} WHERE ${dialect.idIn('SELECT ID FROM doomed')}
      RETURNING ID AS "ID", target AS "target", service AS "service", event AS "event"`,
    params: [...own.params, ...dead.params, ...expired.params, limit]
  }
}

/** The counters of the ordering keys' sequence numbers (db/consumer.cds). */
const SEQUENCES = 'cds_outbox_KeySequences'

/** The next sequence number of `orderingKey`: its counter created at 1 or incremented, read back, in one statement. */
export function nextSequence(appid: string | null, orderingKey: string): Fragment {
  return {
    sql: `INSERT INTO ${SEQUENCES} (appid, orderingKey, issued) VALUES (?, ?, 1)
      ON CONFLICT (appid, orderingKey) DO UPDATE SET issued = ${SEQUENCES}.issued + 1 RETURNING issued AS "issued"`,
    params: [appid ?? '', orderingKey]
  }
}

/** The number `sequence` kept with the message `ID`, if no claim numbered it before. */
export function assignSequence(ID: string, sequence: number): Fragment {
  return { sql: `UPDATE ${TABLE} SET sequence = ? WHERE ID = ? AND sequence = ${UNNUMBERED}`, params: [sequence, ID] }
}

/** What receivers record (db/consumer.cds). */
const RECEIPTS = 'cds_outbox_Receipts'

/**
 * An inbound message's receipt, new (duplicates 0), or the count of its redeliveries incremented, read back in one
 * statement: a concurrent transaction recording the same receipt is waited for, then counted.
 */
export function receive({ scope, ID }: ReceiptRef, now: number): Fragment {
  return {
    sql: `INSERT INTO ${RECEIPTS} (scope, ID, state, duplicates, recordedAt) VALUES (?, ?, 'received', 0, ?)
      ON CONFLICT (scope, ID) DO UPDATE SET duplicates = ${RECEIPTS}.duplicates + 1 RETURNING duplicates AS "duplicates"`,
    params: [scope, ID, iso(now)]
  }
}

/** A redelivery counted on the receipt `scope`, `ID` if there is one (see `QueueStore.countRedelivery`). */
export function countRedelivery({ scope, ID }: ReceiptRef): Fragment {
  return { sql: `UPDATE ${RECEIPTS} SET duplicates = duplicates + 1 WHERE scope = ? AND ID = ?`, params: [scope, ID] }
}

/** A statement that reaches the database and the table and reads nothing: is the database there? */
export function ping(): Fragment {
  return { sql: `SELECT 1 AS "ok" FROM ${TABLE} WHERE 1 = 0`, params: [] }
}
