/**
 * Keyed messages run in `timestamp` order, and some databases keep less of it through CQL than the codec writes
 * (@cap-js/sqlite stores milliseconds; the codec counts microseconds within one): a keyed message enqueued in the
 * same millisecond as the previous one of its key gets the next millisecond, so its order survives any precision.
 * Only messages of the present, as in the codec: a delayed message takes its place at its due time, and a message
 * enqueued after it but due before it must not be moved behind it.
 */
export class KeyClock {
  /** The last millisecond given to each key, for the present only (see `prune`). */
  private readonly issued = new Map<string, number>()
  private prunedAt = 0

  /**
   * How long an entry is kept after its millisecond: a message's timestamp is taken just before it is written, but
   * a loaded event loop can put time between the two. Pruned by the message's own time, an entry could go while a
   * message of the same millisecond still waited to be written, and the two would tie (then their IDs decide).
   */
  static readonly KEPT = 10_000

  /** The epoch milliseconds a message of `key` stamped `ms` is written with; `now`: the present (epoch ms). */
  next(key: string, ms: number, now: number): number {
    if (ms > now) return ms
    this.prune(now)
    const last = this.issued.get(key)
    const at = last !== undefined && ms <= last ? last + 1 : ms
    this.issued.set(key, at)
    return at
  }

  /** At most once a second: one walk over the entries, however many messages are written meanwhile. */
  private prune(now: number): void {
    if (now - this.prunedAt < 1000) return
    this.prunedAt = now
    for (const [key, at] of this.issued) if (at < now - KeyClock.KEPT) this.issued.delete(key)
  }
}
