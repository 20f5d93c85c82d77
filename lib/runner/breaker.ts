import type { CircuitBreakerSettings, Outcome } from '../interfaces'
import { LOG } from '../log'

/** `closed`: messages run. `open`: the queue pauses until the probe time. `probing`: one message runs as a probe. */
export type BreakerState = 'closed' | 'open' | 'probing'

/**
 * A queue's `circuitBreaker` in this process: after `failures` consecutive failed attempts it opens and the queue's
 * messages stay in the table; after `probeInterval` one message runs as a probe; its success closes it (the queue
 * resumes), its failure opens it for another interval. An attempt abandoned after `handlerTimeout` failed (a remote
 * system that never answers is down). Attempts that were not the handler's (a lost claim, a hand-back) count neither
 * way; such a probe is replaced by the next message.
 */
export class CircuitBreaker {
  state: BreakerState = 'closed'
  private failures = 0
  private probeAt = 0
  private probeRunning = false

  constructor(
    private readonly queue: string,
    private readonly settings: CircuitBreakerSettings
  ) {}

  /** Messages that may start now: all while closed, one probe at a time once the probe time has come. */
  allowance(now: number): number {
    if (this.state === 'closed') return Infinity
    if (this.state === 'open' && now >= this.probeAt) this.state = 'probing'
    return this.state === 'probing' && !this.probeRunning ? 1 : 0
  }

  started(): void {
    if (this.state === 'probing') this.probeRunning = true
  }

  /** When a probe may start, if none may now. */
  opensAt(now: number): number | undefined {
    return this.allowance(now) > 0 || this.probeRunning ? undefined : this.probeAt
  }

  settled(outcome: Outcome, now: number): void {
    if (outcome.kind === 'succeeded') return this.succeeded()
    if (outcome.kind === 'retry' || outcome.kind === 'dead' || outcome.kind === 'abandoned') return this.failed(now)
    // a probe handed back or taken over said nothing about the remote system: the next message probes instead
    this.probeRunning = false
  }

  private succeeded(): void {
    this.failures = 0
    if (this.state === 'closed') return
    this.state = 'closed'
    this.probeRunning = false
    LOG.info(`queue ${this.queue}: circuit breaker closed, a message succeeded; the queue resumes`)
  }

  private failed(now: number): void {
    this.failures++
    const probeFailed = this.state === 'probing' && this.probeRunning
    if (!probeFailed && (this.state !== 'closed' || this.failures < this.settings.failures)) return
    this.state = 'open'
    this.probeRunning = false
    this.probeAt = now + this.settings.probeInterval
    const why = probeFailed ? 'the probe failed' : `${this.failures} consecutive failed attempts`
    LOG.warn(`queue ${this.queue}: circuit breaker open after ${why}; the queue pauses, one message runs as a probe every ${this.settings.probeInterval} ms`)
  }
}
