import type { Claim, MessageRow, QueueSettings } from '../interfaces'
import { iso } from './rows'

/**
 * The rules every part of the plugin applies to rows of `cds.outbox.Messages` — the store's SQL, the runner and the
 * operator service's CQL — defined once.
 *
 * CAP's columns are the truth, with CAP's meaning: `attempts` at or above the `maxAttempts` of the row's queue is a
 * dead letter; `status = 'processing'` is held by a runner; otherwise the row is pending, first due at `timestamp`.
 * The plugin's columns are an index of that truth for its claim: `dueAt` is when the row may be claimed next (while
 * claimed: when the lease expires; null for a dead letter), `claimedBy`/`claimedAt` who holds it. Whoever else writes
 * CAP's columns (CAP's dead letter recipe, an operator script, CAP's own runner during a rolling upgrade) leaves the
 * index behind; the runner's reconciliation (NativeStore.reconcile) brings it in line again.
 */

export const TABLE = 'cds_outbox_Messages'
export const ENTITY = 'cds.outbox.Messages'

/** What a runner writes into `status` while it holds a row (CAP's value). */
export const PROCESSING = 'processing'

/**
 * `claimedBy` of a row another runner holds (`status = 'processing'` without a claim of this plugin, e.g. CAP's own
 * runner): the plugin leaves it alone for a lease, as for its own claims, then takes it over.
 */
export const FOREIGN_CLAIM = 'another queue runner'

/** What the claim's index says of a row: who holds it (null: nobody), since when, and when it may be claimed next. */
export interface ClaimIndex {
  claimedBy: string | null
  claimedAt: number | null
  dueAt: number
}

/**
 * The index of a row whose CAP columns someone else wrote, read at `now` (the reconciliation's rules, for one row
 * whose `lastAttemptTimestamp` is known): nobody holds it while its `status` is null, so it is due; otherwise another
 * runner holds it until its last attempt is `timeout` old (CAP's rule; from `now` without one), then it is due.
 */
export function indexOfWritten(status: string | null, lastAttemptTimestamp: number, timeout: number, now: number): ClaimIndex {
  if (status === null) return { claimedBy: null, claimedAt: null, dueAt: now }
  const until = Number.isNaN(lastAttemptTimestamp) ? now + timeout : lastAttemptTimestamp + timeout
  return { claimedBy: FOREIGN_CLAIM, claimedAt: now, dueAt: Math.max(now, until) }
}

/** A piece of SQL with its parameters. */
export interface Fragment {
  sql: string
  params: unknown[]
}

type Cqn = { xpr: unknown[] }
const ref = (name: string) => ({ ref: [name] })
const val = (value: unknown) => ({ val: value })

/** Which rows this app owns: CAP's `appid` lets several apps share one table. `alias` qualifies the column. */
export function ownRowsSql(appid: string | undefined, alias = ''): Fragment {
  return appid ? { sql: `${alias}appid = ?`, params: [appid] } : { sql: `${alias}appid IS NULL`, params: [] }
}

/**
 * Rows of this app written before CAP had `appid`: no `appid`, the app's name as the prefix of `target` (CAP 10
 * processes them as its own). Undefined without an `appid`: then every row without one is this app's anyway.
 */
export function oldRowsSql(appid: string | undefined, alias = ''): Fragment | undefined {
  if (!appid) return undefined
  const prefix = appid.replace(/[\\%_]/g, c => '\\' + c)
  return { sql: `${alias}appid IS NULL AND ${alias}target LIKE ? ESCAPE '\\'`, params: [prefix + '%'] }
}

/** `oldRowsSql` as a CQN condition, for the portable store: CAP's `startswith` instead of LIKE, which needs no escaping. */
export function oldRowsCqn(appid: string | undefined): Cqn | undefined {
  if (!appid) return undefined
  return { xpr: [ref('appid'), 'is', 'null', 'and', { func: 'startswith', args: [ref('target'), val(appid)] }] }
}

/** The service an old row is for when its `msg` does not say: its target without the app's prefix (CAP 10's rule). */
export function serviceOfOldRow(target: string, appid: string | undefined): string {
  return appid && target.startsWith(appid) ? target.slice(appid.length) : target
}

/** A task row as the stores read it to tell whose task it is (see `serviceOfTask`). */
export interface TaskRow {
  ID: string
  service: string | null
  msg: string | null
  target: string
}

/**
 * The service a task row is for: the plugin's `service` column; for rows others wrote (CAP's built-in queue leaves it
 * empty), the `service` of their message, else their target as `serviceOfOldRow` reads it. Undefined if the message
 * is no JSON object: such a row is nobody's task to remove.
 */
export function serviceOfTask(row: TaskRow, appid: string | undefined): string | undefined {
  if (row.service) return row.service
  try {
    const msg: unknown = JSON.parse(row.msg ?? '')
    if (!msg || typeof msg !== 'object') return undefined
    const { service } = msg as { service?: unknown }
    return typeof service === 'string' ? service : serviceOfOldRow(row.target, appid)
  } catch {
    return undefined
  }
}

/** `ownRowsSql` as a CQN condition, for the operator service's queries. */
export function ownRowsCqn(appid: string | undefined): Cqn {
  return { xpr: appid ? [ref('appid'), '=', val(appid)] : [ref('appid'), 'is', 'null'] }
}

/** A message is a dead letter once its attempts reach the `maxAttempts` of its queue. */
export function isDeadLetter(attempts: number, queue: QueueSettings): boolean {
  return attempts >= queue.maxAttempts
}

/**
 * The queues' attempt limits as the database sees them: the `target`s with each limit, and the limit of every other
 * target (the default queue's, as `QueueRegistry.forTarget` applies it).
 */
export interface AttemptLimits {
  byLimit: Map<number, string[]>
  otherwise: number
}

/**
 * A condition over `target` for settings that differ by queue: `term(value)` for the targets of each group, and
 * `term(otherwise)` for every other target. A group whose term is undefined matches none of its rows; undefined if
 * no row matches at all.
 */
function perTarget<V>(groups: Map<V, string[]>, otherwise: V, term: (value: V) => Fragment | undefined): Fragment | undefined {
  const terms: string[] = []
  const params: unknown[] = []
  const known: string[] = []
  for (const [value, targets] of groups) {
    known.push(...targets)
    const t = term(value)
    if (!t) continue
    terms.push(`(target IN (${targets.map(() => '?').join(', ')}) AND ${t.sql})`)
    params.push(...targets, ...t.params)
  }
  const rest = term(otherwise)
  if (rest) {
    terms.push(`(${known.length ? `target NOT IN (${known.map(() => '?').join(', ')}) AND ` : ''}${rest.sql})`)
    params.push(...known, ...rest.params)
  }
  return terms.length ? { sql: `(${terms.join(' OR ')})`, params } : undefined
}

/** `isDeadLetter` as SQL over `attempts` and `target`, for every queue at once. */
export function deadLettersSql({ byLimit, otherwise }: AttemptLimits, dead = true): Fragment {
  const op = dead ? '>=' : '<'
  // every target has a limit, so the condition always exists
  return perTarget(byLimit, otherwise, limit => ({ sql: `attempts ${op} ?`, params: [limit] }))!
}

/**
 * How long each queue keeps its dead letters (ms), as the database sees them, grouped like `AttemptLimits`:
 * undefined keeps them.
 */
export interface Retentions {
  byRetention: Map<number | undefined, string[]>
  otherwise: number | undefined
}

/**
 * How `lastError` begins on a row whose relay waits for its broker, uncharged (lib/runner/broker-waits.ts), followed
 * by when this wait began (ISO) and why: the table says which events wait and since when, to every instance and the
 * CLI. The marks are cleared when the broker is back.
 */
export const WAITING_MARK = 'Waiting for the broker since '

/**
 * Since when a pending message is due, which its relay lag counts from: its `timestamp` (its enqueue, a delayed
 * message's `after`), also while a failed attempt waits for its retry; a revived dead letter that has not failed again
 * (attempts 0, its last error kept) from the revive, which sets `lastAttemptTimestamp` (CAP's runner waits on that
 * column only after attempts). Rows handed back unstarted keep their claim's `lastAttemptTimestamp` but no last error:
 * they count from `timestamp`, and so do rows waiting for their broker (`WAITING_MARK`: not revived, and their lag must
 * go on growing while they wait). One expression for SQL and CQL (CXL) alike.
 */
export const DUE_SINCE = `CASE WHEN attempts = 0 AND lastError IS NOT NULL AND lastError NOT LIKE '${WAITING_MARK}%' AND lastAttemptTimestamp > timestamp THEN lastAttemptTimestamp ELSE timestamp END`

/** `lastError` of a row that waits for its broker since `since` (epoch ms), for `reason` (none: not stored). */
export const waitingMark = (since: number, reason: string | undefined): string => `${WAITING_MARK}${new Date(since).toISOString()}${reason ? `: ${reason}` : ''}`

/** When the wait a mark names began (ISO), or undefined for a `lastError` that is no such mark. */
export function waitingSince(lastError: string | null | undefined): string | undefined {
  return lastError?.startsWith(WAITING_MARK) ? lastError.slice(WAITING_MARK.length, WAITING_MARK.length + 24) : undefined
}

/**
 * Rows past their queue's dead-letter retention at `now`, counted from their last attempt (when they became dead
 * letters; from enqueue for rows without one); undefined if every queue keeps its dead letters.
 */
export function expiredSql({ byRetention, otherwise }: Retentions, now: number): Fragment | undefined {
  return perTarget(byRetention, otherwise, retention =>
    retention === undefined ? undefined : { sql: 'COALESCE(lastAttemptTimestamp, timestamp) < ?', params: [iso(now - retention)] })
}

/** `perTarget` as CQN: `term(value)` for the targets of each group, `term(otherwise)` for every other target. */
function perTargetCqn<V>(groups: Map<V, string[]>, otherwise: V, term: (value: V) => unknown[] | undefined): Cqn | undefined {
  const terms: unknown[] = []
  const known: string[] = []
  for (const [value, targets] of groups) {
    known.push(...targets)
    const t = term(value)
    if (!t) continue
    if (terms.length) terms.push('or')
    terms.push({ xpr: [ref('target'), 'in', { list: targets.map(val) }, 'and', ...t] })
  }
  const rest = term(otherwise)
  if (rest) {
    if (terms.length) terms.push('or')
    const others = known.length ? [ref('target'), 'not', 'in', { list: known.map(val) }, 'and'] : []
    terms.push({ xpr: [...others, ...rest] })
  }
  return terms.length ? { xpr: terms } : undefined
}

/** `isDeadLetter` as a CQN condition over `attempts` and `target`; `dead: false` selects the rows that are not. */
export function deadLettersCqn({ byLimit, otherwise }: AttemptLimits, dead = true): Cqn {
  const op = dead ? '>=' : '<'
  // every target has a limit, so the condition always exists
  return perTargetCqn(byLimit, otherwise, limit => [ref('attempts'), op, val(limit)])!
}

/** `expiredSql` as CQN. */
export function expiredCqn({ byRetention, otherwise }: Retentions, now: number): Cqn | undefined {
  const lastTouched = { func: 'coalesce', args: [ref('lastAttemptTimestamp'), ref('timestamp')] }
  return perTargetCqn(byRetention, otherwise, retention => (retention === undefined ? undefined : [lastTouched, '<', val(iso(now - retention))]))
}

/**
 * A dead letter that blocks nothing: unkeyed, or one that left its key (`orderingOnDeadLetter: 'continue'`). One that
 * keeps its key (`'block'`) holds the key's later messages back until an operator revives or deletes it, so the
 * retention never removes it: they would run with no operator decision.
 */
export const BLOCKS_NOTHING: { sql: string; cqn: Cqn } = { sql: 'orderingKey IS NULL', cqn: { xpr: [ref('orderingKey'), 'is', 'null'] } }

/** How the store marks a dead letter for its claim: no due time, so no claim ever takes it. */
export const NOT_DUE = { sql: 'dueAt IS NULL', cqn: { dueAt: null } } as const

/**
 * `dueAt` of a message parked behind an earlier message of its ordering key: past any claim's range, so claims
 * never read it, however many there are. When its key's earlier messages are done, it becomes due at its `timestamp`
 * (see `promoteNext`). A text literal, so partial indexes and the statements that use them agree on every database.
 */
export const PARKED = "'9999-12-31T00:00:00.000Z'"
/** `PARKED` as a value, for CQL. */
export const PARKED_AT = PARKED.slice(1, -1)

/** What handing a claimed row back writes: nobody holds it. */
export const UNCLAIMED = { sql: 'status = NULL, claimedBy = NULL, claimedAt = NULL', cqn: { status: null, claimedBy: null, claimedAt: null } } as const

/**
 * Rows `IDs` while the claim of `claimedBy` at `claimedAt` still holds them, as CQN (statements.underClaims is the same
 * guard in SQL): every outcome is written only under it. The rows of one claim share owner and time.
 */
export function underClaimsCqn(claims: Claim[]): Cqn {
  const { claimedBy, claimedAt } = claims[0]
  return {
    xpr: [ref('claimedBy'), '=', val(claimedBy), 'and', ref('claimedAt'), '=', val(new Date(claimedAt).toISOString()),
      'and', ref('ID'), 'in', { list: claims.map(c => val(c.ID)) }]
  }
}

/** The claim of `row` as `claimedBy` holds it. */
export function claimOf(row: MessageRow, claimedBy: string): Claim {
  return { ID: row.ID, claimedBy, claimedAt: row.claimedAt, orderingKey: row.orderingKey ?? null }
}
