import { decode, type DecodedMessage } from '../codec'
import type { Claim, MessageRow, Outcome, QueueSettings } from '../interfaces'
import type { QueueStore } from '../store'
import { isDeadLetter } from '../store/rules'
import { dispatchInTx, runtimeInfo, traced } from './dispatch'
import { failed, isOccurrence, NOT_STARTED, stillScheduled, succeeded } from './outcomes'
import { clock } from '../time/clock'

/** One attempt of one claimed message: settle what must not run, dispatch the rest, and say what it came to. */

/** A claimed message of a slot, as its attempt sees it (slot.ts makes them from the slot's leases). */
export interface SlotEntry {
  row: MessageRow
  claim: Claim
  signal: AbortSignal
  /** Called once the message's work has committed (its row is gone): its lease needs no more renewal. */
  committed(): void
  /** Starts the message (`Holdings.begin`), unless the runner has taken it back meanwhile: false then (`notStarted`). */
  start(): boolean
}

/**
 * What a message comes to that the runner took back before its turn (shutdown, a lost lease, a hand-back): an attempt
 * that failed with its signal's reason, which the runner's release or the lease's takeover then settles.
 */
export function notStarted(entry: SlotEntry, queue: QueueSettings): AttemptResult {
  return { outcome: failed(entry.signal.reason, entry.row, queue) }
}

export interface AttemptResult {
  outcome: Outcome
  message?: DecodedMessage
}

/** What an attempt needs before its handler runs: the decoded message, or the outcome that makes running it moot. */
export type Prepared = { message: DecodedMessage; outcome?: undefined } | { outcome: Outcome; message?: DecodedMessage }

/**
 * Decodes a claimed row and settles the rows that must not run: corrupt, out of attempts, or not yet due. A row's
 * sequence number (given by its claim) is the message's `req.queue.sequence`; a row without one keeps what its `msg`
 * says (written before numbers were given at the claim).
 */
export function prepare(row: MessageRow, queue: QueueSettings): Prepared {
  let message: DecodedMessage
  try {
    message = withSequence(decode(row.msg, row.serviceOfOldRow ?? row.target), row.sequence)
  } catch (e) {
    return { outcome: { kind: 'dead', error: e, attempts: Math.max(row.attempts, queue.maxAttempts) } }
  }
  // Attempts written by someone else (an operator, CAP's runner) or a lowered maxAttempts: already a dead letter.
  if (isDeadLetter(row.attempts, queue)) {
    return { outcome: { kind: 'dead', error: row.lastError ?? 'maxAttempts reached', attempts: row.attempts, silent: true }, message }
  }
  // Rows written by CAP's built-in queue with a delay become claimable at once: wait for their time.
  if (row.timestamp > clock.now()) return { outcome: { kind: 'deferred', dueAt: new Date(row.timestamp) }, message }
  return { message }
}

function withSequence(message: DecodedMessage, sequence: number | null | undefined): DecodedMessage {
  if (!sequence) return message
  const { request } = message
  return { ...message, request: { ...request, queue: { ...request.queue, sequence } } }
}

/** A claimed message of a slot, decoded and due to run (see `prepare`): `index` is its place in the slot. */
export interface ReadyEntry extends SlotEntry {
  message: DecodedMessage
  index: number
}

/**
 * Decodes the slot's `entries` and settles those that must not run (`prepare`), their results in `results` (by index):
 * what is left to run, in slot order. A settled one counts as started, unless the runner took it back meanwhile.
 */
export function prepareAll(entries: SlotEntry[], queue: QueueSettings, results: AttemptResult[]): ReadyEntry[] {
  const ready: ReadyEntry[] = []
  entries.forEach((entry, index) => {
    const prepared = prepare(entry.row, queue)
    if (!prepared.outcome) return void ready.push({ ...entry, message: prepared.message, index })
    results[index] = entry.start() ? prepared : notStarted(entry, queue)
  })
  return ready
}

/**
 * Runs one claimed message through its service, in a transaction of that service with the stored event context.
 * The row is deleted in that same transaction, so the handler's database writes and the completion commit or
 * roll back together.
 */
export async function attempt(entry: ReadyEntry, queue: QueueSettings, store: QueueStore): Promise<AttemptResult> {
  const { row, claim, message, signal } = entry
  if (isOccurrence(row, message) && !(await stillScheduled(claim, store))) return { outcome: NOT_STARTED, message }
  try {
    await traced(row, message, () => dispatchInTx(message, runtimeInfo(row, signal), (srv, result) =>
      succeeded(row, claim, message, queue, store, srv, result), { atStart: () => store.lockOnBegin(), claimed: row }))
    return { outcome: { kind: 'succeeded' }, message }
  } catch (error) {
    return { outcome: failed(error, row, queue), message }
  }
}
