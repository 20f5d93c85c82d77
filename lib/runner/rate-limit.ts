import type { Taken } from '../controls/rate-window'

/**
 * A queue's `rateLimit`, as this process sees it: the window itself is shared by every instance in the queue's control
 * row (see controls/rate-window.ts), so starts are taken there, a claim's worth at a time. Once a take finds the
 * window full, this process knows until when and does not ask again before: the queue is skipped by claims meanwhile.
 */
export class RateLimit {
  private fullUntil = 0

  constructor(private readonly takeShared: (wanted: number) => Promise<Taken>) {}

  /** Messages that may start now, as far as this process knows: none while the window is known to be full. */
  allowance(now: number): number {
    return now < this.fullUntil ? 0 : Infinity
  }

  /** When the next message may start, if none may now. */
  opensAt(now: number): number | undefined {
    return now < this.fullUntil ? this.fullUntil : undefined
  }

  /** Takes up to `wanted` starts from the shared window; how many it got. */
  async take(wanted: number): Promise<number> {
    const { granted, opensAt } = await this.takeShared(wanted)
    if (opensAt !== undefined) this.fullUntil = opensAt
    return granted
  }

  /** The window could not be read: nothing starts for `ms`, then it is asked again. */
  unknownFor(ms: number, now: number): void {
    this.fullUntil = now + ms
  }
}
