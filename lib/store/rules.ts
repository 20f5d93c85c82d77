import type { Claim, MessageRow, QueueSettings } from '../interfaces'

/**
 * The rules every part of the plugin applies to rows of `cds.outbox.Messages` — the store's SQL, the runner and the
 * operator service's CQL — defined once: which rows are this app's, which are dead letters, what releasing a claim
 * writes.
 */

export const TABLE = 'cds_outbox_Messages'
export const ENTITY = 'cds.outbox.Messages'

/** A piece of SQL with its parameters. */
export interface Fragment {
  sql: string
  params: unknown[]
}

type Cqn = { xpr: unknown[] }

/** Which rows this app owns: CAP's `appid` lets several apps share one table. `alias` qualifies the column. */
export function ownRowsSql(appid: string | undefined, alias = ''): Fragment {
  return appid ? { sql: `${alias}appid = ?`, params: [appid] } : { sql: `${alias}appid IS NULL`, params: [] }
}

/** `ownRowsSql` as a CQN condition, for the operator service's queries. */
export function ownRowsCqn(appid: string | undefined): Cqn {
  return { xpr: appid ? [{ ref: ['appid'] }, '=', { val: appid }] : [{ ref: ['appid'] }, 'is', 'null'] }
}

/** A message is a dead letter once its attempts reach the `maxAttempts` of its queue. */
export function isDeadLetter(attempts: number, queue: QueueSettings): boolean {
  return attempts >= queue.maxAttempts
}

/**
 * How the store marks a dead letter: no due time, so no claim ever takes it. Rows without a due time are dead letters
 * only where `isDeadLetter` holds as well (a row's queue may have raised its `maxAttempts` since).
 */
export const NOT_DUE = { sql: 'dueAt IS NULL', cqn: { dueAt: null } } as const

/** What handing a claimed row back writes: nobody holds it. */
export const UNCLAIMED = { sql: 'status = NULL, claimedBy = NULL, claimedAt = NULL', cqn: { status: null, claimedBy: null, claimedAt: null } } as const

/** The claim of `row` as `claimedBy` holds it. */
export function claimOf(row: MessageRow, claimedBy: string): Claim {
  return { ID: row.ID, claimedBy, claimedAt: row.claimedAt }
}
