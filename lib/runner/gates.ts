import type { QueueControls } from '../controls/queue-controls'
import { takeStarts, writeBreaker, type SharedBreaker } from '../controls/table'
import type { Outcome, QueueSettings } from '../interfaces'
import type { Tenant } from '../tenants/tenants'
import { CircuitBreaker } from './breaker'
import { RateLimit } from './rate-limit'
import { LOG } from '../log'

/** What the gates need of the runner. */
export interface GatesHost {
  /** The instance's name, recorded with the breaker changes it shares. */
  readonly owner: string
  readonly appid: string | undefined
  /** The control rows as this process knows them: pauses and the breakers' shared state. */
  readonly controls: QueueControls
  /** Runs `fn` in a transaction of its own in `tenant`'s database. */
  inTenant<T>(tenant: Tenant, fn: () => Promise<T>): Promise<T>
  /** Tells the other instances that a control row changed (PostgreSQL's notification; nothing elsewhere). */
  announce(): Promise<void>
  wake(): void
}

/** How long a queue waits when its shared rate window could not be read (the database is away): then it asks again. */
const WINDOW_RETRY = 1000

/**
 * What holds a queue's messages back besides the slots: an operator's pause, its `rateLimit` and its `circuitBreaker`
 * — each shared by every instance on the database through the queue's control row (db/controls.cds), per tenant. A
 * gated queue's messages run one per slot (so a start is a handler call) and are never claimed at enqueue; a queue
 * whose gate is shut is skipped by claims, and the runner is woken when it opens again. A queue without a rate limit
 * or breaker that nobody paused passes without a statement.
 */
export class Gates {
  private readonly limits = new Map<string, RateLimit>()
  private readonly breakers = new Map<string, CircuitBreaker>()
  /** The last write of each breaker's changes: they are written one after another, so the row ends with the latest. */
  private readonly writes = new Map<string, Promise<void>>()
  /** Changes of each breaker still being written: until they are, the row may still say what it said before. */
  private readonly writing = new Map<string, number>()
  private timer: NodeJS.Timeout | undefined
  private timerAt = Infinity

  constructor(private readonly host: GatesHost) {}

  /** Whether `queue`'s messages in `tenant` pass the gates (no claim at enqueue, one message per slot). */
  gated(tenant: Tenant, queue: QueueSettings): boolean {
    return !!(queue.rateLimit || queue.circuitBreaker) || this.host.controls.isPaused(tenant, queue.name)
  }

  /** Reads the control rows of `tenant` again when they are due (see QueueControls.refresh). */
  refresh(tenant: Tenant): Promise<void> {
    return this.host.controls.refresh(tenant)
  }

  private limitOf(tenant: Tenant, queue: QueueSettings): RateLimit | undefined {
    const settings = queue.rateLimit
    if (!settings) return undefined
    const key = JSON.stringify([tenant, queue.name])
    let limit = this.limits.get(key)
    if (!limit) {
      const take = (wanted: number) => this.host.inTenant(tenant, () => takeStarts(this.host.appid, queue.name, settings, wanted))
      this.limits.set(key, (limit = new RateLimit(take)))
    }
    return limit
  }

  private breakerOf(tenant: Tenant, queue: QueueSettings, now: number): CircuitBreaker | undefined {
    if (!queue.circuitBreaker) return undefined
    const key = JSON.stringify([tenant, queue.name])
    let breaker = this.breakers.get(key)
    if (!breaker) {
      const created: CircuitBreaker = new CircuitBreaker(queue.name, queue.circuitBreaker, change => this.share(tenant, created, queue.name, change))
      this.breakers.set(key, (breaker = created))
    }
    if (!this.writing.get(key)) breaker.adopt(this.host.controls.control(tenant, queue.name)?.breaker, now)
    return breaker
  }

  /** Messages of `queue` that may start now as far as this process knows (Infinity: nothing holds it back). */
  private allowance(tenant: Tenant, queue: QueueSettings, now: number): number {
    if (this.host.controls.isPaused(tenant, queue.name)) return 0
    const limit = this.limitOf(tenant, queue)?.allowance(now) ?? Infinity
    const breaker = this.breakerOf(tenant, queue, now)?.allowance(now) ?? Infinity
    return Math.max(0, Math.min(limit, breaker))
  }

  /**
   * The queues of `tenant` claims skip now: the paused ones, and of `queues` those whose gate lets nothing start;
   * wakes the runner when the first opens again.
   */
  shut(tenant: Tenant, queues: QueueSettings[], now = Date.now()): string[] {
    const paused = this.host.controls.paused(tenant)
    const shut = queues.filter(q => (q.rateLimit || q.circuitBreaker) && !paused.includes(q.name) && this.allowance(tenant, q, now) === 0)
    for (const queue of shut) {
      const at = Math.max(this.limitOf(tenant, queue)?.opensAt(now) ?? 0, this.breakerOf(tenant, queue, now)?.opensAt(now) ?? 0)
      // a probe running: its outcome wakes the runner (a slot that ends does)
      if (at > 0) this.wakeAt(at, now)
    }
    return [...paused, ...shut.map(q => q.name)]
  }

  /**
   * How many of `wanted` claimed messages of `queue` may start now: none while it is paused, a probe while its breaker
   * is open, and what the shared window of its rate limit grants (taken from it: they count as started).
   */
  async admit(tenant: Tenant, queue: QueueSettings, wanted: number, now = Date.now()): Promise<number> {
    const allowed = Math.min(wanted, this.allowance(tenant, queue, now))
    const limit = this.limitOf(tenant, queue)
    if (!limit || allowed === 0) return allowed
    try {
      return await limit.take(allowed)
    } catch (e) {
      LOG.warn(`queue ${queue.name}: could not take starts from its rate limit's window; it waits ${WINDOW_RETRY} ms:`, e)
      limit.unknownFor(WINDOW_RETRY, now)
      this.wakeAt(now + WINDOW_RETRY, now)
      return 0
    }
  }

  started(tenant: Tenant, queue: QueueSettings, now = Date.now()): void {
    this.breakerOf(tenant, queue, now)?.started(now)
  }

  settled(tenant: Tenant, queue: QueueSettings, outcome: Outcome, now = Date.now()): void {
    this.breakerOf(tenant, queue, now)?.settled(outcome, now)
  }

  /**
   * Writes a change of this process's breaker into the queue's control row and tells the other instances. If the
   * database is away, the breaker still holds in this process.
   */
  private share(tenant: Tenant, breaker: CircuitBreaker, queue: string, change: SharedBreaker): void {
    const shared = { ...change, by: this.host.owner }
    const known = this.host.controls.control(tenant, queue)
    this.host.controls.apply(tenant, { queue, pausedAt: known?.pausedAt, pausedBy: known?.pausedBy, breaker: shared })
    const key = JSON.stringify([tenant, queue])
    this.writing.set(key, (this.writing.get(key) ?? 0) + 1)
    const write = (this.writes.get(key) ?? Promise.resolve())
      .then(() => this.host.inTenant(tenant, async () => {
        await writeBreaker(this.host.appid, queue, shared)
        await this.host.announce()
      }))
      .catch(e => {
        // the tenant was unsubscribed (its handlers abandoned): its database is not opened again, nothing to share
        if ((e as { code?: string }).code !== 'TENANT_UNSUBSCRIBED') LOG.warn(`queue ${queue}: could not share its circuit breaker's change with other instances; it holds in this one:`, e)
      })
      .finally(() => {
        breaker.written(shared)
        this.writing.set(key, (this.writing.get(key) ?? 1) - 1)
      })
    this.writes.set(key, write)
  }

  private wakeAt(at: number, now: number): void {
    if (at >= this.timerAt && this.timer) return
    clearTimeout(this.timer)
    this.timerAt = at
    this.timer = setTimeout(() => {
      this.timer = undefined
      this.timerAt = Infinity
      this.host.wake()
    }, Math.max(0, at - now)).unref()
  }

  stop(): void {
    clearTimeout(this.timer)
    this.timer = undefined
    this.timerAt = Infinity
  }
}
