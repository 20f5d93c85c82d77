import type { QueueSettings } from '../interfaces'

/**
 * The runner's handler slots: how many are in use, per queue too. A slot runs one message, or a batch of a backlog's
 * messages one after another, so at most `concurrency` handlers run at once; a queue's own `concurrency` bounds its
 * share. Only `Holdings` changes them (see holdings.ts), which also knows the slots promised to messages being enqueued.
 */
export class Slots {
  private used = 0
  private readonly perQueue = new Map<string, { queue: QueueSettings; used: number }>()

  constructor(
    private readonly concurrency: number,
    private readonly batchSize: number
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
   * The size of the next claim and the queues it skips: those using all their slots in this process. A queue with
   * some slots left bounds the claim to what they take, since one claim may take all its rows from that queue.
   * `slots`: the share of the free slots the claim may fill (a tenant's, see loop.ts).
   */
  claimBounds(chunkSize: number, slots = this.free): { limit: number; full: string[] } {
    let limit = Math.min(chunkSize, Math.min(slots, this.free) * this.batchSize)
    const full: string[] = []
    for (const { queue, used } of this.perQueue.values()) {
      const free = this.limitOf(queue) - used
      if (free <= 0) full.push(queue.name)
      else limit = Math.min(limit, free * this.batchSize)
    }
    return { limit, full }
  }

  take(queue: QueueSettings): void {
    this.used++
    const entry = this.perQueue.get(queue.name)
    if (entry) entry.used++
    else this.perQueue.set(queue.name, { queue, used: 1 })
  }

  /**
   * Frees a slot of `queue`; true when the runner should claim again. Refills come in batches, not per slot (a claim
   * per finished message would double the statements): once half of the runner's slots, or half of a queue's held at
   * its own limit, are free.
   */
  give(queue: QueueSettings): boolean {
    this.used--
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
export type SlotCounts = Pick<Slots, 'free' | 'freeFor' | 'claimBounds'>
