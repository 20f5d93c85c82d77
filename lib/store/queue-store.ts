import type { DatabaseTransaction } from '../cap/transactions'
import type { Claim, DeadOnArrival, DeletedMessage, MessageRow, NewMessage, QueueSnapshot, ReceiptRef, RowState } from '../interfaces'
import type { AttemptLimits, ClaimIndex, Retentions } from './rules'
import type { Described } from './statements'

/**
 * What the runner and the API use of a store: every statement the queue runs on `cds.outbox.Messages`, one method
 * each, with the same guarantees whichever store runs them. Two implement it: the native store (native.ts, raw SQL on
 * the driver connection of SQLite and PostgreSQL) and the portable store (portable.ts, CQL only, any database CAP
 * runs on); choose.ts picks one. Statements run in the current transaction (`cds.context`), so an enqueue is part of
 * the caller's transaction and a completion part of the handler's.
 */
export interface QueueStore {
  /** The statement a dedicated connection runs to be told of new messages; undefined where only polling works. */
  readonly listenStatement: string | undefined
  /** Writes a new message in the current transaction. */
  insert(message: NewMessage): Promise<void>
  /** Writes a new message already claimed by `claim` until `leaseUntil` (claim at enqueue). */
  insertClaimed(message: NewMessage, claim: Claim, leaseUntil: number): Promise<void>
  /** Writes a new message as a dead letter, in the current transaction: it is never claimed until an operator revives it. */
  insertDeadLetter(message: NewMessage, dead: DeadOnArrival): Promise<void>
  /** Writes a scheduled task, or replaces its row with failure state and claim reset. */
  upsertTask(message: NewMessage): Promise<void>
  /** Removes a scheduled task, whatever its state; the number of rows removed. */
  unschedule(ID: string): Promise<number>
  /**
   * Removes those of the rows `IDs` that are this app's task `task` of `service` (IDs another task may share: those
   * CAP's built-in queue gives a task); the number removed.
   */
  unscheduleTaskOf(IDs: string[], task: string, service: string): Promise<number>
  /**
   * Claims up to `limit` due rows for `owner` until `leaseUntil`, in due order while their stored messages add up to
   * at most `maxBytes` (the first one whatever its size), none of the queues `skipTargets` nor of the services
   * `skipServices` (rows that name no service are taken): see NativeStore.claim for the rules. A keyed message the
   * claim takes first gets its sequence number, in the claim's transaction (lib/store/sequences.ts).
   */
  claim(owner: string, now: number, leaseUntil: number, limit: number, skipTargets?: string[], maxBytes?: number, skipServices?: string[]): Promise<MessageRow[]>
  /** Deletes a processed row while the claim holds it; false if it was lost. */
  complete(claim: Claim): Promise<boolean>
  /** Deletes the processed rows of one claim while it holds them; the number deleted. */
  completeAll(claims: Claim[]): Promise<number>
  /** Moves a completed occurrence of a recurring task to its next one; false if the claim is gone. */
  recur(claim: Claim, timestamp: string, dueAt: Date): Promise<boolean>
  /** Whether a task row still holds the occurrence claimed with this `timestamp` (epoch ms). */
  holdsOccurrence(ID: string, timestamp: number): Promise<boolean>
  /** Lets the next message of each ordering key in `keys` run, where it waits for an earlier one that is gone. */
  promoteNext(keys: (string | null | undefined)[]): Promise<void>
  /** Records a failed attempt: due again at `dueAt`, or a dead letter when `dueAt` is null. */
  fail(claim: Claim, attempts: number, lastError: string | null, dueAt: Date | null, now: number, leaveKey: boolean, described: Described): Promise<boolean>
  /**
   * Hands claimed rows back unprocessed, due at `dueAt` (default: their claim time); the number handed back. `alone`:
   * they run alone from now on (they count as interrupted).
   */
  release(claims: Claim[], dueAt?: Date, alone?: boolean): Promise<number>
  /**
   * Hands a claimed row back without an attempt, due at `dueAt`, because its messaging service's broker is away,
   * `lastError` its waiting mark (see `WAITING_MARK`); a row written by others gets the service and event of its
   * message (`described`), so that claims can skip it.
   */
  waitForBroker(claim: Claim, dueAt: Date, lastError: string, described: Described): Promise<boolean>
  /** The broker of `service` is back: its rows' waiting marks are cleared. */
  clearWaitingMarks(service: string): Promise<void>
  /** How many of this app's messages of `service` are no dead letters (pending, or claimed). */
  aliveOf(service: string, limits: AttemptLimits): Promise<number>
  /** Marks the attempts of `claims` (of one claim) as started, so the takeover of their leases counts them. */
  interrupt(claims: Claim[]): Promise<void>
  /** CAP's columns and the claim of the rows `IDs` that exist, as the current transaction sees them. */
  rowStates(IDs: string[]): Promise<RowState[]>
  /** Gives up the row `claim` holds, its index written as `index` says; false if the claim did not hold it. */
  reindex(claim: Claim, index: ClaimIndex): Promise<boolean>
  /** Which of `claims` the table holds (their rows exist, still under these claims): their IDs. */
  stillClaimed(claims: Claim[]): Promise<Set<string>>
  /** Moves the leases of `claims` (of one claim) to `until`, in a transaction of its own; the IDs of those still held. */
  renewAll(claims: Claim[], until: number): Promise<Set<string>>
  /** Brings the plugin's index columns in line with CAP's columns where others wrote them; the rows changed. */
  reconcile(limits: AttemptLimits, now: number, timeout: number): Promise<number>
  /**
   * Parks keyed rows others wrote (CAP's runner, scripts, a bulk import) behind an earlier message of their key,
   * so claims never read them: a bounded number in the current transaction, and whether more may be left (the caller
   * goes on in a transaction of its own, until none is).
   */
  park(): Promise<Parked>
  /** The claims held in the names `owners` according to the table. */
  claimsOf(owners: string[]): Promise<Claim[]>
  /**
   * When the next row becomes due (or a lease expires) after `after`, of queues other than `skipTargets`; undefined
   * if nothing is pending.
   */
  nextDue(after: number, skipTargets?: string[]): Promise<number | undefined>
  /**
   * Per queue of this app: its messages by state (parked rows of an ordering key are pending) and its relay lag at
   * `now`, the age of its oldest message due by then, for the gauges and the health check.
   */
  queueStatistics(limits: AttemptLimits, now: number): Promise<QueueSnapshot[]>
  /**
   * Deletes up to `limit` of this app's dead letters past their queue's retention at `now`, skipping rows another
   * transaction holds; what it deleted (nothing if every queue keeps its dead letters).
   */
  deleteExpiredDeadLetters(limits: AttemptLimits, retentions: Retentions, now: number, limit: number): Promise<DeletedMessage[]>
  /** A statement that needs the database and the queue table and reads no row: fails if either is not there. */
  ping(): Promise<void>
  /**
   * Records the receipt of an inbound message in the current transaction (see lib/receipts/inbox.ts); false when it
   * was recorded before: the message is a redelivery, now counted. A transaction recording the same receipt at the
   * same moment is waited for.
   */
  receive(receipt: ReceiptRef, now: number): Promise<boolean>
  /** Counts a redelivery on `receipt` in the current transaction, if it was recorded; whether it was. */
  countRedelivery(receipt: ReceiptRef): Promise<boolean>
  /**
   * A lock on `name` for the current transaction, in the current schema, without waiting: false if another
   * transaction holds it. True where the database has no such locks (SQLite, whose single writer serialises anyway;
   * the portable store).
   */
  tryLock(name: string): Promise<boolean>
  /** Creates the indexes the claim needs where the store can (idempotent). */
  ensureIndexes(): Promise<void>
  /** Closes what the store opened of its own. */
  close(): Promise<void>
  /**
   * The current transaction, not begun yet, runs a handler and then completes its message: where the database has
   * one writer and snapshots (SQLite), it takes the write lock as it begins (see `lockWhenBegun` in dialect.ts).
   */
  lockOnBegin(): void
}

/** What one `park` did: the rows it parked, and whether more may be waiting for it. */
export interface Parked {
  parked: number
  more: boolean
}

/** One message's part of a transaction several messages share (see `BatchingStore.savepointed`). */
export interface Savepointed {
  /** The shared transaction as this message's handlers see it. */
  tx: DatabaseTransaction
  /** Undoes this message's statements, if it ran any. */
  rollback(): Promise<void>
  /** Keeps them, as part of the shared transaction. */
  release(): Promise<void>
}

/**
 * A store that can run several messages in one transaction, a savepoint around each (batch.ts). CAP has no
 * documented savepoint API, so only the native store is one; the portable store runs a transaction per message.
 */
export interface BatchingStore extends QueueStore {
  /** The current transaction, for several messages to share. */
  sharedTransaction(): DatabaseTransaction
  /** The shared transaction as one message sees it: its statements in a savepoint `name` of their own. */
  savepointed(shared: DatabaseTransaction, name: string): Savepointed
}

export function batches(store: QueueStore): store is BatchingStore {
  return typeof (store as Partial<BatchingStore>).savepointed === 'function'
}
