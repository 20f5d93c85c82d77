import cds from '@sap/cds'
import { QueueError } from '../errors'
import type { Claim } from '../interfaces'
import type { QueueStore } from '../store'
import { runInTenant } from '../tenants/tenants'
import { LOG } from '../log'
import { clock } from '../time/clock'

/** A failed renewal is retried this soon (or at the regular interval, if that is shorter): the lease must not run out. */
const RETRY_RENEWAL = 1000

/**
 * Why a handler's `req.queue.signal` aborted: its `reason`, with `code` SHUTDOWN, LEASE_LOST, HANDLER_TIMEOUT or
 * UNSUBSCRIBED (its tenant was unsubscribed in this process: its database is gone). HANDED_BACK only ever aborts
 * messages of a batch that have not started (no handler sees it).
 */
export class AttemptAborted extends QueueError {
  constructor(message: string, code: 'SHUTDOWN' | 'LEASE_LOST' | 'HANDLER_TIMEOUT' | 'HANDED_BACK' | 'UNSUBSCRIBED') {
    super(message, code)
    this.name = 'AttemptAborted'
  }
}

/**
 * Whether `signal` aborted because the message's tenant was unsubscribed. Then nothing of the attempt may write in
 * the tenant any more — no outcome, no renewal, no hand-back, no completion, and its transaction must not begin —
 * as any write would open the tenant's database again (on SQLite, create its file anew).
 */
export function tenantGone(signal: AbortSignal): boolean {
  return signal.aborted && (signal.reason as AttemptAborted | undefined)?.code === 'UNSUBSCRIBED'
}

/** Throws the reason of `signal` if its tenant was unsubscribed (see `tenantGone`). */
export function throwIfTenantGone(signal: AbortSignal): void {
  if (tenantGone(signal)) throw signal.reason
}

/**
 * Holds the claim of one running message. The lease (`dueAt`) is renewed every third of `timeout` by the message's
 * `Renewals` (one statement for all messages of a slot), so a crashed process's messages are taken over after
 * `timeout` while a live process's long handler keeps its claim and runs once. Renewal ends when the handler
 * finishes, when the claim turns out to be lost, or after `handlerTimeout`: then the handler is abandoned (its signal
 * aborts) and the message is taken over once the lease expires.
 */
export class Lease {
  private readonly controller = new AbortController()
  private deadline: NodeJS.Timeout | undefined
  private giveUp: () => void = () => {}
  /** Resolves when the handler ran longer than `handlerTimeout`: the runner stops waiting for it. */
  readonly abandoned = new Promise<void>(resolve => (this.giveUp = resolve))
  /** The tenant whose database holds the message (slots run in their tenant's context). */
  readonly tenant: string | undefined = cds.context?.tenant

  constructor(
    readonly claim: Claim,
    private readonly handlerTimeout: number,
    private readonly renewals: Renewals
  ) {}

  /** Aborted on shutdown (after the grace period), on lease loss and after `handlerTimeout`. */
  get signal(): AbortSignal {
    return this.controller.signal
  }

  start(): void {
    this.renewals.add(this)
    this.deadline = setTimeout(() => {
      this.abort(new AttemptAborted(`Message ${this.claim.ID}: its handler did not finish within handlerTimeout (${this.handlerTimeout} ms)`, 'HANDLER_TIMEOUT'))
      this.giveUp()
    }, this.handlerTimeout).unref()
  }

  /**
   * The tenant was unsubscribed: the handler's signal aborts and the runner stops waiting for it at once, as after
   * `handlerTimeout`; it writes nothing of the attempt (see `tenantGone`).
   */
  abandon(reason: AttemptAborted): void {
    this.abort(reason)
    this.giveUp()
  }

  /** Ends renewal and aborts the handler's signal with `reason`. */
  abort(reason: AttemptAborted): void {
    this.stop()
    if (!this.controller.signal.aborted) this.controller.abort(reason)
  }

  /** Ends renewal; the lease then runs out unless the claim is completed or handed back. */
  stop(): void {
    this.renewals.delete(this)
    clearTimeout(this.deadline)
  }
}

/**
 * Renews the leases of the messages one slot runs (a message, or a batch of one queue), in one short transaction
 * every third of `timeout`: a renewal per message would compete with the batch for connections and fall behind. The
 * first renewal comes sooner where the claim's lease (`leaseUntil`) is shorter than `timeout` (claims at enqueue).
 */
export class Renewals {
  private readonly leases = new Set<Lease>()
  private timer: NodeJS.Timeout | undefined
  private failures = 0

  /** Until when the leases last for sure: the last lease written. */
  private heldUntil: number
  /** The tenant whose database holds the messages (a slot runs in its tenant's context). */
  private readonly tenant: string | undefined = cds.context?.tenant

  constructor(
    private readonly timeout: number,
    private readonly store: QueueStore,
    leaseUntil: number
  ) {
    this.heldUntil = leaseUntil
  }

  add(lease: Lease): void {
    this.leases.add(lease)
    if (!this.timer) this.schedule(Math.min(this.interval, (this.heldUntil - clock.now()) / 2))
  }

  /** A handler must stop before its lease runs out, not after another instance took its message over. */
  private get margin(): number {
    return Math.min(RETRY_RENEWAL, this.timeout / 10)
  }

  delete(lease: Lease): void {
    this.leases.delete(lease)
    if (this.leases.size === 0) clearTimeout(this.timer)
  }

  private get interval(): number {
    return Math.max(1, Math.floor(this.timeout / 3))
  }

  private schedule(delay: number): void {
    clearTimeout(this.timer)
    this.timer = this.leases.size ? setTimeout(() => void this.renew(), Math.max(1, delay)).unref() : undefined
  }

  private async renew(): Promise<void> {
    const leases = [...this.leases]
    let stillClaimed: Set<string>
    const until = clock.now() + this.timeout
    try {
      // A transaction of its own in the messages' tenant, detached from whichever context the timer fired in.
      stillClaimed = await runInTenant(this.tenant, () => this.store.renewAll(leases.map(l => l.claim), until))
    } catch (e) {
      this.failures++
      const left = this.heldUntil - clock.now()
      if (left <= this.margin) {
        LOG.error(`could not renew the lease of ${describe(leases)} before it ends; aborting the handlers, the messages are taken over:`, e)
        for (const lease of leases) lease.abort(new AttemptAborted(`Message ${lease.claim.ID}: its lease could not be renewed in time`, 'LEASE_LOST'))
        return
      }
      LOG.warn(`could not renew the lease of ${describe(leases)} (${this.failures}x); retrying:`, e)
      return this.schedule(Math.min(this.interval, RETRY_RENEWAL, left - this.margin))
    }
    this.heldUntil = until
    if (this.failures) LOG.info(`renewed the lease of ${describe(leases)} again after ${this.failures} failures`)
    this.failures = 0
    // A renewal racing a handler's own completion finds the row gone: only a running handler has lost its claim.
    for (const lease of leases) {
      if (stillClaimed.has(lease.claim.ID) || !this.leases.has(lease)) continue
      LOG.warn(`message ${lease.claim.ID}: its claim was taken over or the row deleted while the handler ran; aborting the handler`)
      lease.abort(new AttemptAborted(`Message ${lease.claim.ID}: the claim was lost while the handler ran`, 'LEASE_LOST'))
    }
    this.schedule(this.interval)
  }
}

function describe(leases: Lease[]): string {
  return leases.length === 1 ? `message ${leases[0].claim.ID}` : `${leases.length} messages (${leases[0].claim.ID}, …)`
}
