import type { Outcome, QueueSettings } from '../interfaces'
import { CircuitBreaker } from './breaker'
import { RateLimit } from './rate-limit'

/**
 * What holds a queue's messages back in this process besides its slots: its `rateLimit` and its `circuitBreaker`.
 * A gated queue's messages run one per slot (so a start is a handler call) and are never claimed at enqueue; a queue
 * whose gate is shut is skipped by claims, and the runner is woken when it opens again.
 */
export class Gates {
  private readonly limits = new Map<string, RateLimit>()
  private readonly breakers = new Map<string, CircuitBreaker>()
  private timer: NodeJS.Timeout | undefined
  private timerAt = Infinity

  constructor(private readonly wake: () => void) {}

  /** Whether `queue` has a gate at all. */
  gated(queue: QueueSettings): boolean {
    return !!(queue.rateLimit || queue.circuitBreaker)
  }

  private limitOf(queue: QueueSettings): RateLimit | undefined {
    if (!queue.rateLimit) return undefined
    let limit = this.limits.get(queue.name)
    if (!limit) this.limits.set(queue.name, (limit = new RateLimit(queue.rateLimit)))
    return limit
  }

  private breakerOf(queue: QueueSettings): CircuitBreaker | undefined {
    if (!queue.circuitBreaker) return undefined
    let breaker = this.breakers.get(queue.name)
    if (!breaker) this.breakers.set(queue.name, (breaker = new CircuitBreaker(queue.name, queue.circuitBreaker)))
    return breaker
  }

  /** Messages of `queue` that may start now (Infinity: no gate holds it back). */
  allowance(queue: QueueSettings, now = Date.now()): number {
    const limit = this.limitOf(queue)?.allowance(now) ?? Infinity
    const breaker = this.breakerOf(queue)?.allowance(now) ?? Infinity
    return Math.max(0, Math.min(limit, breaker))
  }

  /** The queues, of those in `queues`, that may start nothing now; wakes the runner when the first opens again. */
  shut(queues: QueueSettings[], now = Date.now()): string[] {
    const shut = queues.filter(q => this.gated(q) && this.allowance(q, now) === 0)
    for (const queue of shut) {
      const at = Math.max(this.limitOf(queue)?.opensAt(now) ?? 0, this.breakerOf(queue)?.opensAt(now) ?? 0)
      // a probe running: its outcome wakes the runner (a slot that ends does)
      if (at > 0) this.wakeAt(at, now)
    }
    return shut.map(q => q.name)
  }

  started(queue: QueueSettings, count: number, now = Date.now()): void {
    this.limitOf(queue)?.started(count, now)
    this.breakerOf(queue)?.started()
  }

  settled(queue: QueueSettings, outcome: Outcome, now = Date.now()): void {
    this.breakerOf(queue)?.settled(outcome, now)
  }

  private wakeAt(at: number, now: number): void {
    if (at >= this.timerAt && this.timer) return
    clearTimeout(this.timer)
    this.timerAt = at
    this.timer = setTimeout(() => {
      this.timer = undefined
      this.timerAt = Infinity
      this.wake()
    }, Math.max(0, at - now)).unref()
  }

  stop(): void {
    clearTimeout(this.timer)
    this.timer = undefined
    this.timerAt = Infinity
  }
}
