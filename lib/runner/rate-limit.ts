import type { RateLimitSettings } from '../interfaces'

/**
 * A queue's `rateLimit` in this process: the start times of its messages within the last `per` ms (a sliding window),
 * so that no window of that length holds more than `count` starts.
 */
export class RateLimit {
  private readonly starts: number[] = []

  constructor(private readonly settings: RateLimitSettings) {}

  private trim(now: number): void {
    while (this.starts.length && this.starts[0] <= now - this.settings.per) this.starts.shift()
  }

  /** Messages that may start now. */
  allowance(now: number): number {
    this.trim(now)
    return this.settings.count - this.starts.length
  }

  started(count: number, now: number): void {
    for (let i = 0; i < count; i++) this.starts.push(now)
  }

  /** When the next message may start, if none may now. */
  opensAt(now: number): number | undefined {
    return this.allowance(now) > 0 ? undefined : this.starts[0] + this.settings.per
  }
}
