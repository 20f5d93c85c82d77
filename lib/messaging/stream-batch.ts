import type { RedisLink } from './redis-link'
import type { StreamEntry } from './stream-entries'

/**
 * The entries one read gave this consumer, kept its own while it works through them. Another consumer of the group
 * claims an entry once it has been idle (received, not acknowledged) for `claimAfter` (XAUTOCLAIM): that is how the
 * entries of a dead consumer are taken over, and it must not happen to a live consumer's batch, which it handles one
 * entry after the other. So the batch's unacknowledged entries are claimed again by their own consumer every quarter
 * of `claimAfter` (XCLAIM … JUSTID, which resets their idle time), like the queue's lease renewals; `claimAfter` is then
 * the time a consumer may be unresponsive (frozen, its event loop blocked), not the time its batch takes.
 *
 * An entry claimed away all the same (this process stalled for longer than `claimAfter`) is not handled here:
 * before an entry is handled, the batch makes sure it is still this consumer's (`owns`).
 */

export class OwnedBatch {
  /** The batch's entries not yet acknowledged, by stream. */
  private readonly unacknowledged = new Map<string, Set<string>>()
  /** Entries another consumer claimed meanwhile (`entryKey`: two streams may have entries of the same ID). */
  private readonly lost = new Set<string>()
  private renewing: Promise<void> | undefined
  private readonly timer: NodeJS.Timeout

  /** `touchedAt`: when the read that gave these entries was sent (it set their idle time to 0). */
  constructor(
    private readonly link: RedisLink,
    private readonly group: string,
    private readonly consumer: string,
    private readonly claimAfter: number,
    entries: StreamEntry[],
    private touchedAt: number
  ) {
    for (const { stream, id } of entries) this.idsOf(stream).add(id)
    this.timer = setInterval(() => void this.renew().catch(() => undefined), claimAfter / 4)
    this.timer.unref()
  }

  /**
   * Whether `entry` is still this consumer's. Another consumer may claim an entry only once it has been idle for
   * `claimAfter`, so an entry renewed less than half of that ago is; otherwise (the renewals were late: this process
   * stalled) the batch is renewed first, which tells.
   */
  async owns(entry: StreamEntry): Promise<boolean> {
    if (Date.now() - this.touchedAt >= this.claimAfter / 2) await this.renew()
    return !this.lost.has(entryKey(entry.stream, entry.id))
  }

  /** `entry` was acknowledged: no longer renewed. */
  acknowledged(entry: StreamEntry): void {
    this.unacknowledged.get(entry.stream)?.delete(entry.id)
  }

  /** Stops renewing; what is left unacknowledged is claimed by another consumer once it is `claimAfter` idle. */
  close(): void {
    clearInterval(this.timer)
  }

  private idsOf(stream: string): Set<string> {
    let ids = this.unacknowledged.get(stream)
    if (!ids) this.unacknowledged.set(stream, (ids = new Set()))
    return ids
  }

  /** One renewal at a time: a late timer and `owns` share the one in flight. */
  private renew(): Promise<void> {
    this.renewing ??= this.renewAll().finally(() => (this.renewing = undefined))
    return this.renewing
  }

  /**
   * Claims the batch's entries again for this consumer, but only those idle since the last renewal: an entry another
   * consumer claimed was idle for `claimAfter` before, so less than `sinceTouched - claimAfter` since; the bound halfway
   * between leaves it to that consumer. XPENDING first says which are still this consumer's, XCLAIM then resets their
   * idle time; one it does not return was trimmed from the stream meanwhile (Redis drops it from the pending list),
   * and it stays this consumer's to handle, since its content was read and nobody else can have it. The rest is lost
   * to this consumer.
   */
  private async renewAll(): Promise<void> {
    const sentAt = Date.now()
    const minIdle = Math.max(0, Math.floor(sentAt - this.touchedAt - this.claimAfter / 2))
    for (const [stream, ids] of this.unacknowledged) {
      if (ids.size === 0) continue
      const sorted = [...ids].sort(compareIds)
      const pending = await this.link.send<unknown[][]>(['XPENDING', stream, this.group, 'IDLE', minIdle, sorted[0], sorted[sorted.length - 1], ids.size + PENDING_MARGIN, this.consumer])
      const mine = new Set(pending.map(p => String(p[0])))
      const still = sorted.filter(id => mine.has(id))
      const claimed = new Set(still.length ? await this.link.send<string[]>(['XCLAIM', stream, this.group, this.consumer, minIdle, ...still, 'JUSTID']) : [])
      for (const id of sorted) {
        if (claimed.has(id)) continue
        // trimmed (no longer pending, nothing to renew) or lost
        ids.delete(id)
        if (!mine.has(id)) this.lost.add(entryKey(stream, id))
      }
    }
    this.touchedAt = sentAt
  }
}

const entryKey = (stream: string, id: string) => `${stream}\n${id}`

/** Room for entries of this consumer's pending list within the batch's range that are not in the batch. */
const PENDING_MARGIN = 100

/** Stream IDs (`<ms>-<seq>`) in stream order. */
function compareIds(a: string, b: string): number {
  const [am, as] = a.split('-').map(BigInt)
  const [bm, bs] = b.split('-').map(BigInt)
  return am === bm ? Number(as - bs) : am < bm ? -1 : 1
}
