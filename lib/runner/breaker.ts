import type { BreakerState, SharedBreaker } from '../controls/table'
import type { CircuitBreakerSettings, Outcome } from '../interfaces'
import { LOG } from '../log'

export type { BreakerState }

/**
 * A queue's `circuitBreaker`: after `failures` consecutive failed attempts in this process it opens and the queue's
 * messages stay in the table; after `probeInterval` one message runs as a probe; its success closes it (the queue
 * resumes), its failure opens it for another interval. An attempt abandoned after `handlerTimeout` failed (a remote
 * system that never answers is down). Attempts that were not the handler's (a lost claim, a hand-back) count neither
 * way; such a probe is replaced by the next message.
 *
 * Every change is shared through the queue's control row (`share`), and a change another instance or an operator
 * made there is taken over (`adopt`): one instance's failures open the queue's breaker in all of them, one probe's
 * success closes it everywhere, and an operator's `resume` closes it.
 */
export class CircuitBreaker {
  state: BreakerState = 'closed'
  private failures = 0
  private probeAt = 0
  private probeRunning = false
  /**
   * The shared states lately taken over or written here: a row that says one of them brings no news — also when a
   * read that began before this process's last write returns the row as it was before it.
   */
  private readonly seen: string[] = []
  /** When this process last changed the state (epoch ms), so that its changes are recorded in order. */
  private changedAt = 0

  constructor(
    private readonly queue: string,
    private readonly settings: CircuitBreakerSettings,
    /** Writes a change of this process into the queue's control row. */
    private readonly share: (change: SharedBreaker) => void = () => {}
  ) {}

  /** Messages that may start now: all while closed, one probe at a time once the probe time has come. */
  allowance(now: number): number {
    if (this.state === 'closed') return Infinity
    if (this.state === 'open' && now >= this.probeAt) this.state = 'probing'
    return this.state === 'probing' && !this.probeRunning ? 1 : 0
  }

  started(now = Date.now()): void {
    if (this.state !== 'probing' || this.probeRunning) return
    this.probeRunning = true
    this.changed(now, { state: 'probing', until: now })
  }

  /** When a probe may start, if none may now. */
  opensAt(now: number): number | undefined {
    return this.allowance(now) > 0 || this.probeRunning ? undefined : this.probeAt
  }

  settled(outcome: Outcome, now: number): void {
    if (outcome.kind === 'succeeded') return this.succeeded(now)
    if (outcome.kind === 'retry' || outcome.kind === 'dead' || outcome.kind === 'abandoned') return this.failed(now)
    // a probe handed back or taken over said nothing about the remote system: the next message probes instead
    this.probeRunning = false
  }

  /**
   * Takes over what the queue's control row says, if it changed since this process last took over or wrote it (the
   * caller does not ask while a change of this process is still being written): another instance opened or closed
   * the breaker, or an operator resumed the queue. Changes are told apart by what they say, not by their times, so
   * clocks that disagree cannot hide one. A probe running elsewhere keeps this process waiting for one more interval;
   * if its outcome does not arrive by then (its instance died), this one probes.
   */
  adopt(shared: SharedBreaker | undefined, now: number): void {
    if (!shared?.at || !this.remember(signature(shared))) return
    const by = shared.by ? ` by ${shared.by}` : ''
    if (shared.state === 'closed') {
      const wasOpen = this.state !== 'closed'
      this.state = 'closed'
      this.failures = 0
      this.probeRunning = false
      if (wasOpen) LOG.info(`queue ${this.queue}: circuit breaker closed${by}; the queue resumes`)
      return
    }
    if (this.probeRunning) return
    this.state = 'open'
    this.probeAt = shared.state === 'open' ? (shared.until ?? now) : Math.max(now, shared.until ?? now) + this.settings.probeInterval
    const what = shared.state === 'open' ? `open until ${new Date(this.probeAt).toISOString()}` : 'probing'
    LOG.info(`queue ${this.queue}: circuit breaker ${what}${by}; the queue pauses in this process too`)
  }

  private succeeded(now: number): void {
    this.failures = 0
    if (!this.probeRunning) return
    this.state = 'closed'
    this.probeRunning = false
    this.changed(now, { state: 'closed', until: undefined })
    LOG.info(`queue ${this.queue}: circuit breaker closed, a message succeeded; the queue resumes`)
  }

  private failed(now: number): void {
    this.failures++
    const probeFailed = this.state === 'probing' && this.probeRunning
    if (!probeFailed && (this.state !== 'closed' || this.failures < this.settings.failures)) return
    this.state = 'open'
    this.probeRunning = false
    this.probeAt = now + this.settings.probeInterval
    this.changed(now, { state: 'open', until: this.probeAt })
    const why = probeFailed ? 'the probe failed' : `${this.failures} consecutive failed attempts`
    LOG.warn(`queue ${this.queue}: circuit breaker open after ${why}; the queue pauses, one message runs as a probe every ${this.settings.probeInterval} ms`)
  }

  /** A change of this process is in the row now (`shared`, as written): it is no news when read back. */
  written(shared: SharedBreaker): void {
    this.remember(signature(shared))
  }

  /** Whether `state` is news, remembering it; a few are enough, a stale read returns one of the last. */
  private remember(state: string): boolean {
    if (this.seen.includes(state)) return false
    this.seen.push(state)
    if (this.seen.length > SEEN) this.seen.shift()
    return true
  }

  private changed(now: number, change: Pick<SharedBreaker, 'state' | 'until'>): void {
    this.changedAt = Math.max(now, this.changedAt + 1)
    this.share({ ...change, by: undefined, at: this.changedAt })
  }
}

/** How many shared states a breaker remembers as seen. */
const SEEN = 8

const signature = (shared: SharedBreaker) => JSON.stringify([shared.state, shared.until, shared.by, shared.at])
