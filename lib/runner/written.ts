import type { MessageRow, QueueSettings } from '../interfaces'
import type { QueueStore } from '../store'
import { claimOf, indexOfWritten, PROCESSING } from '../store/rules'

/**
 * CAP's columns decide over a claim at enqueue (docs/MIGRATING.md#caps-columns-decide), whoever wrote them and when — also the enqueuing
 * transaction itself, after the enqueue: a script or the app's own bookkeeping that sets `status`,
 * `lastAttemptTimestamp`, `attempts` or `timestamp`. Its commit is the last moment to see them before the message
 * runs from memory.
 */

/** A message written claimed at enqueue, to run from memory after the commit. */
export interface Enqueued {
  row: MessageRow
  claimedBy: string
  queue: QueueSettings
}

/**
 * Reads the rows of `enqueued` back in the enqueuing transaction, before it commits (one statement for all), and
 * returns those that still run: still claimed as written, their rows with the attempts, last error and timestamp the table
 * gives them. A row deleted meanwhile does not run; one whose claim CAP's columns ended — released (`status` null),
 * or claimed by another runner (a `lastAttemptTimestamp` that is not the claim's) — is given up, its index set as the
 * reconciliation sets it, for a claim to take it when CAP's rules say.
 */
export async function stillClaimedAsWritten<E extends Enqueued>(store: QueueStore, enqueued: E[], now: number): Promise<E[]> {
  const states = new Map((await store.rowStates(enqueued.map(e => e.row.ID))).map(state => [state.ID, state]))
  const kept: E[] = []
  for (const entry of enqueued) {
    const state = states.get(entry.row.ID)
    // gone, or claimed by someone else now: nothing of this claim is left to run or give up
    if (!state || state.claimedBy !== entry.claimedBy || state.claimedAt !== entry.row.claimedAt) continue
    if (state.status === PROCESSING && state.lastAttemptTimestamp === entry.row.claimedAt) {
      const { attempts, lastError, timestamp } = state
      entry.row = { ...entry.row, attempts, lastError, timestamp }
      kept.push(entry)
    } else {
      await store.reindex(claimOf(entry.row, entry.claimedBy), indexOfWritten(state.status, state.lastAttemptTimestamp, entry.queue.timeout, now))
    }
  }
  return kept
}
