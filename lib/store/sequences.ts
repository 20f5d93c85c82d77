import type { MessageRow } from '../interfaces'

/**
 * Sequence numbers of ordering keys (docs/CONSUMER.md): a keyed message gets the next number of its key from the claim
 * that first takes it, in that claim's transaction, and keeps it (`sequence` of cds.outbox.Messages) on every retry,
 * after a lost lease and when revived. A key's messages are claimed one at a time, in their order, so its numbers
 * follow the order they run in; and nothing of the numbering is in the application's transaction, whose locks it
 * would join: two transactions queueing for two keys in opposite order deadlocked on the keys' counters (issue 31).
 */

/** `sequence` of a keyed message that no claim has numbered yet. */
export const UNNUMBERED = 0

/**
 * A keyed row a claim numbered, as SQL on its `sequence` (after an alias and a dot, or alone): the key's first rows,
 * before those waiting for their number (see `firstOfKey` in statements.ts); the condition of the index that finds them.
 */
export const NUMBERED = `sequence > ${UNNUMBERED}`

/** What a store does for the numbering, in the current transaction. */
export interface Numbering {
  /** The next number of `orderingKey` (1 for its first message): its counter incremented, locked until commit. */
  nextSequence(orderingKey: string): Promise<number>
  /** Stores `sequence` with the message `ID` if it has none yet. */
  assignSequence(ID: string, sequence: number): Promise<void>
}

/**
 * The claimed `rows`, those of them that wait for their number numbered. In the order of their keys: claims running
 * side by side lock the counters they increment in one order, so they never wait for each other in a circle.
 */
export async function numberClaimed(store: Numbering, rows: MessageRow[]): Promise<MessageRow[]> {
  const waiting = rows.filter((r): r is MessageRow & { orderingKey: string } => r.sequence === UNNUMBERED && typeof r.orderingKey === 'string')
  if (waiting.length === 0) return rows
  const issued = new Map<string, number>()
  for (const row of waiting.sort((a, b) => (a.orderingKey < b.orderingKey ? -1 : a.orderingKey > b.orderingKey ? 1 : 0))) {
    const sequence = await store.nextSequence(row.orderingKey)
    await store.assignSequence(row.ID, sequence)
    issued.set(row.ID, sequence)
  }
  return rows.map(r => {
    const sequence = issued.get(r.ID)
    return sequence === undefined ? r : { ...r, sequence }
  })
}

/** What a keyed message of `orderingKey` is written with: waiting for its number; null for an unkeyed one. */
export function initialSequence(orderingKey: string | undefined): number | null {
  return orderingKey === undefined ? null : UNNUMBERED
}
