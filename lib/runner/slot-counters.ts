import type { MessageRow, QueueSettings } from '../interfaces'

/**
 * What `rows` hold of the heap, as `maxClaimBytes` counts it: their stored messages' length (characters; bytes for
 * the ASCII of JSON, whose other characters the claim's byte count weighs more, never less).
 */
export function payloadBytes(rows: readonly MessageRow[]): number {
  // a row others wrote may have no message at all (it dead-letters as corrupt)
  return rows.reduce((sum, row) => sum + (row.msg?.length ?? 0), 0)
}

/**
 * The runner's handler slots: how many are in use, per queue too. A slot runs one message, or a batch of a backlog's
 * messages one after another, so at most `concurrency` handlers run at once; a queue's own `concurrency` bounds its
 * share. Only `Holdings` changes them (see holdings.ts), which also knows the slots promised to messages being enqueued.
 * They also count the bytes of the messages they hold, so that what a process holds stays within `maxClaimBytes`
 * whatever the backlog.
 */
export class SlotCounters {
  private used = 0
  /** Bytes of the stored messages (`msg`) the slots in use hold. */
  private heldBytes = 0
  /** Bytes per message of the slot taken last: the size of the messages a claim expects (see `claimBounds`). */
  private lastMessageBytes = 0
  private readonly perQueue = new Map<string, { queue: QueueSettings; used: number }>()

  constructor(
    private readonly concurrency: number,
    private readonly batchSize: number,
    private readonly maxBytes: number
  ) {}

  get free(): number {
    return this.concurrency - this.used
  }

  /** A queue's limit in this process: its own `concurrency`, within the runner's. */
  limitOf(queue: QueueSettings): number {
    return Math.min(queue.concurrency, this.concurrency)
  }

  private usedBy(queue: QueueSettings): number {
    return this.perQueue.get(queue.name)?.used ?? 0
  }

  /** Slots `queue` may take now. */
  freeFor(queue: QueueSettings): number {
    return Math.max(0, Math.min(this.limitOf(queue) - this.usedBy(queue), this.free))
  }

  /**
   * The size of the next claim, in rows and in bytes, and the queues it skips: those using all their slots in this
   * process. A queue with some slots left bounds the claim to what they take, since one claim may take all its rows
   * from that queue. `slots`: the share of the free slots the claim may fill (a tenant's, see loop.ts). `bytes`: what
   * `maxClaimBytes` leaves of what the slots hold; nothing (0) while they hold that much. A claim looks at no more rows
   * than twice what fill `bytes` at the size of the messages taken last: on SQLite it reads each row it looks at up
   * to the columns behind `msg`, so a claim of 500 rows in a backlog of large messages read them all to take 20.
   */
  claimBounds(chunkSize: number, slots = this.free): { limit: number; bytes: number; full: string[] } {
    const bytes = Math.max(0, this.maxBytes - this.heldBytes)
    let limit = Math.min(chunkSize, Math.min(slots, this.free) * this.batchSize)
    if (this.lastMessageBytes > 0) limit = Math.min(limit, Math.max(1, Math.ceil((2 * bytes) / this.lastMessageBytes)))
    const full: string[] = []
    for (const { queue, used } of this.perQueue.values()) {
      const free = this.limitOf(queue) - used
      if (free <= 0) full.push(queue.name)
      else limit = Math.min(limit, free * this.batchSize)
    }
    return { limit, bytes, full }
  }

  /** A slot of `queue` runs `messages` messages of `bytes` bytes. */
  take(queue: QueueSettings, bytes: number, messages: number): void {
    this.used++
    this.heldBytes += bytes
    this.lastMessageBytes = bytes / messages
    const entry = this.perQueue.get(queue.name)
    if (entry) entry.used++
    else this.perQueue.set(queue.name, { queue, used: 1 })
  }

  /**
   * Frees a slot of `queue` that held `bytes`; true when the runner should claim again. Refills come in batches, not
   * per slot (a claim per finished message would double the statements): once half of the runner's slots, or half of
   * a queue's at its own limit, are free.
   */
  give(queue: QueueSettings, bytes: number): boolean {
    this.used--
    this.heldBytes -= bytes
    const used = this.usedBy(queue) - 1
    if (used > 0) this.perQueue.get(queue.name)!.used = used
    else this.perQueue.delete(queue.name)
    return this.used <= this.concurrency / 2 || used <= this.limitOf(queue) / 2
  }

  /** Whether a slot is left for one more message of `queue` being enqueued, besides the `promised` ones. */
  fits(queue: QueueSettings, promised: number): boolean {
    return this.used + promised < this.concurrency && this.usedBy(queue) + promised < this.limitOf(queue)
  }
}

/** What the runner's loop reads of the slots: they change only through the transitions of `Holdings`. */
export type SlotCounts = Pick<SlotCounters, 'free' | 'freeFor' | 'claimBounds'>
