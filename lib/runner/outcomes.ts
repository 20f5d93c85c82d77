import cds from '@sap/cds'
import { newMessage, timestampAt, CorruptMessage, type DecodedMessage } from '../codec'
import { errorLine, isProgrammingError, isUnrecoverable, retryAfter, storedError } from '../failures'
import type { Claim, MessageRow, Outcome, QueueSettings } from '../interfaces'
import { isDeadLetter, waitingMark } from '../store/rules'
import { maskSecrets } from '../secrets'
import { inOwnTransaction, type QueueStore } from '../store'
import { backoffDelay } from '../time/backoff'
import { nextRun } from '../time/recurrence'
import { callbackFor } from './callbacks'
import { processed } from '../receipts/inbox'
import type { AttemptAborted } from './lease'
import { LOG } from '../log'
import { clock } from '../time/clock'

/**
 * What an attempt came to, in one place: deciding it from the error, writing it (a success in the handler's own
 * transaction, every other outcome after it), its callback, and its log line.
 */

/** The claim was taken over (lease expired) or the row deleted while the handler ran: its work is rolled back. */
class ClaimLost extends Error {
  constructor(ID: string) {
    super(`Message ${ID} was claimed by another process or deleted while it ran; its work was rolled back`)
    this.name = 'ClaimLost'
  }
}

/** Some processed messages' rows were no longer claimed when their shared transaction ended: their work must not commit. */
export class ClaimsLost extends Error {
  constructor(expected: number, deleted: number) {
    super(`${expected - deleted} of ${expected} messages of a batch were claimed by another process or deleted while it ran; the batch was rolled back`)
    this.name = 'ClaimsLost'
  }
}

/**
 * What a message comes to whose transaction, shared with others, failed with `error`: as a failed attempt, or after
 * `ClaimsLost` handed back without counting one (the release is guarded: a lost claim stays with its owner).
 */
export function failedTogether(error: unknown, row: MessageRow, queue: QueueSettings): Outcome {
  return error instanceof ClaimsLost ? { kind: 'deferred', dueAt: new Date(clock.now()) } : failed(error, row, queue)
}

/** Whether a claimed row is an occurrence of a task (CAP's rows of older versions name no task, only `every`). */
export function isOccurrence(row: MessageRow, message: DecodedMessage): boolean {
  return !!row.task || message.request.queue?.every !== undefined
}

/**
 * Whether a claimed occurrence of a task may start: a task unscheduled (its row deleted) or re-scheduled (its row
 * released) after the claim, while messages ahead of it in its slot ran, does not run it. Claimed is not running yet:
 * "a run in progress completes" (SCHEDULING.md) is about a handler that started. Checked in a transaction of its own
 * right before the run's begins (an occurrence heads its transaction, see batch.ts): beginning the run's transaction
 * earlier would hold SQLite's one connection and write lock while a handler that writes nothing awaits. Only for
 * occurrences (`isOccurrence`): nobody changes a claimed message's row, and a message's attempt awaits nothing more.
 */
export async function stillScheduled(claim: Claim, store: QueueStore): Promise<boolean> {
  return (await inOwnTransaction(() => store.stillClaimed([claim]))).has(claim.ID)
}

/** The outcome of an occurrence that was not `stillScheduled`: nothing is written (the row is gone or no longer ours). */
export const NOT_STARTED: Outcome = { kind: 'lost', beforeStart: true }

/**
 * What a failed attempt comes to: a retry after the wait the remote system asked for (`Retry-After`), else after the
 * queue's backoff; or a dead letter.
 */
export function failed(error: unknown, row: MessageRow, queue: QueueSettings): Outcome {
  if (error instanceof ClaimLost) return { kind: 'lost' }
  const attempts = row.attempts + 1
  if (isProgrammingError(error) || isUnrecoverable(error) || error instanceof CorruptMessage) {
    return { kind: 'dead', error, attempts: Math.max(attempts, queue.maxAttempts) }
  }
  if (isDeadLetter(attempts, queue)) return { kind: 'dead', error, attempts }
  const asked = retryAfter(error)
  if (asked?.at !== undefined) return { kind: 'retry', error, attempts, delay: Math.max(0, asked.at - clock.now()), dueAt: new Date(asked.at), retryAfter: true }
  if (asked) return { kind: 'retry', error, attempts, delay: asked.delay, retryAfter: true }
  return { kind: 'retry', error, attempts, delay: backoffDelay(attempts, queue.backoff) }
}

/**
 * A message aborted by shutdown, or handed back before it started, was interrupted, not at fault: it goes back
 * without counting an attempt (guarded by the claim, so a hand-back already done or a new owner is left alone).
 */
export function interrupted(outcome: Outcome, signal: AbortSignal): Outcome {
  const code = signal.aborted ? (signal.reason as AttemptAborted | undefined)?.code : undefined
  const notAtFault = code === 'SHUTDOWN' || code === 'HANDED_BACK'
  return notAtFault && outcome.kind === 'retry' ? { kind: 'deferred', dueAt: new Date(clock.now()) } : outcome
}

/** Deletes a processed message's row in the handler's transaction; false if the claim was lost meanwhile. */
export type Completion = (claim: Claim) => Promise<boolean>

/**
 * Records a handled message in the handler's transaction: its row deleted (`complete`; a batch deletes all of its
 * rows at once) or, for a recurring task, moved to the next occurrence, an inbound message's receipt marked processed
 * (lib/receipts/inbox.ts), and its `#succeeded` callback written. A task
 * re-scheduled or unscheduled while it ran keeps that new state: the handler's work commits and the task does not
 * recur from here, so exactly one chain continues.
 */
export async function succeeded(
  row: MessageRow,
  claim: Claim,
  message: DecodedMessage,
  queue: QueueSettings,
  store: QueueStore,
  srv: cds.Service,
  result: unknown,
  complete: Completion = c => store.complete(c)
): Promise<void> {
  const schedule = message.request.queue
  const next = nextRun(schedule, clock.now(), queue.timezone)
  const done = next ? await store.recur(claim, timestampAt(next.getTime()), next) : await complete(claim)
  if (!done) {
    if (!isOccurrence(row, message) || (await store.holdsOccurrence(row.ID, row.timestamp))) throw new ClaimLost(row.ID)
    LOG._debug && LOG.debug(`${row.target}: task ${row.task} was re-scheduled or unscheduled while it ran; it does not recur from this run`)
  }
  const receipt = schedule?.receipt
  if (receipt) await processed(receipt, queue.receiptRetention)
  const callback = callbackFor(srv, message, { succeeded: result }, queue.secretHeader)
  if (callback) await store.insert(newMessage(queue.name, callback))
}

/**
 * Writes what an attempt came to, for outcomes the handler's own transaction could not record (it rolled back):
 * a retry, a dead letter with its `#failed` callback, a row handed back unprocessed, or an abandoned attempt (counted
 * for the takeover of its lease). Each in one short transaction.
 */
export async function recordOutcome(
  claim: Claim,
  outcome: Outcome,
  message: DecodedMessage | undefined,
  queue: QueueSettings,
  store: QueueStore
): Promise<void> {
  if (outcome.kind === 'succeeded' || outcome.kind === 'lost') return
  const now = clock.now()
  const described = { service: message?.serviceName, event: message?.request.event }
  await inOwnTransaction(async () => {
    if (outcome.kind === 'deferred') return void (await store.release([claim], outcome.dueAt, outcome.alone))
    if (outcome.kind === 'abandoned') return void (await store.interrupt([claim]))
    if (outcome.kind === 'waiting') {
      const reason = queue.storeLastError ? maskSecrets(errorLine(outcome.error)).slice(0, queue.maxErrorLength) : undefined
      return void (await store.waitForBroker(claim, outcome.dueAt, waitingMark(outcome.since, reason).slice(0, queue.maxErrorLength), described))
    }
    const lastError = queue.storeLastError ? storedError(outcome.error, queue.maxErrorLength, cds.root) : null
    // the wait counts from the recorded attempt time, so lastAttemptTimestamp + backoff = dueAt exactly
    if (outcome.kind === 'retry') return void (await store.fail(claim, outcome.attempts, lastError, outcome.dueAt ?? new Date(now + outcome.delay), now, false, described))
    const leaveKey = queue.orderingOnDeadLetter === 'continue'
    const recorded = await store.fail(claim, outcome.attempts, lastError, null, now, leaveKey, described)
    if (recorded && message && !outcome.silent) await writeFailedCallback(queue, message, outcome.error, store)
  })
}

async function writeFailedCallback(queue: QueueSettings, message: DecodedMessage, error: unknown, store: QueueStore): Promise<void> {
  let srv: cds.Service
  try {
    srv = cds.unqueued(await cds.connect.to(message.serviceName))
  } catch {
    return // no such service: nobody can listen for its callbacks
  }
  const callback = callbackFor(srv, message, { failed: error }, queue.secretHeader)
  if (callback) await store.insert(newMessage(queue.name, callback))
}

export function logOutcome(row: MessageRow, outcome: Outcome): void {
  const what = `${row.target}: message ${row.ID}`
  switch (outcome.kind) {
    case 'succeeded':
      LOG._debug && LOG.debug(`${what} processed`)
      break
    case 'retry':
      // one line per retry: the stack is in lastError, and in the debug log
      LOG.warn(`${what} failed (attempt ${outcome.attempts}), retrying in ${outcome.delay} ms${outcome.retryAfter ? ' (as its Retry-After asked)' : ''}: ${errorLine(outcome.error)}`)
      LOG._debug && LOG.debug(`${what} failed:`, outcome.error)
      break
    case 'dead':
      if (isProgrammingError(outcome.error)) LOG.error(`${what}: programming error in the handler, moved to dead letters:`, outcome.error)
      else LOG.error(`${what} is a dead letter after ${outcome.attempts} attempts:`, outcome.error)
      break
    case 'lost':
      if (outcome.beforeStart) LOG.info(`${what}: its task was unscheduled or re-scheduled after the claim; this occurrence does not run`)
      else LOG.warn(`${what}: claim lost while it ran; another process owns it now`)
      break
    case 'deferred':
      LOG._debug && LOG.debug(`${what} deferred to ${outcome.dueAt.toISOString()}`)
      break
    case 'abandoned':
      LOG.error(`${what} did not finish within handlerTimeout; abandoned, taken over when its lease expires`)
      break
    case 'waiting':
      // one line when the outage begins and one when it ends (broker-waits.ts), none per message
      LOG._debug && LOG.debug(`${what} waits for the broker of ${outcome.service}: ${errorLine(outcome.error)}`)
      break
  }
}
