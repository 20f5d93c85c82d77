import cds from '@sap/cds'
import { QueueError } from './errors'
import { inOwnTransaction, type Claim, type Store } from './store'

const LOG = cds.log('queue')

/** A failed renewal is retried this soon (or at the regular interval, if that is shorter): the lease must not run out. */
const RETRY_RENEWAL = 1000

/** Why a handler's `req.queue.signal` aborted: its `reason`, with `code` SHUTDOWN, LEASE_LOST or HANDLER_TIMEOUT. */
export class AttemptAborted extends QueueError {
  constructor(message: string, code: 'SHUTDOWN' | 'LEASE_LOST' | 'HANDLER_TIMEOUT') {
    super(message, code)
    this.name = 'AttemptAborted'
  }
}

/**
 * Holds the claim of one running message. The lease (`dueAt`) is renewed every third of `timeout`, so a crashed
 * process's messages are taken over after `timeout` while a live process's long handler keeps its claim and runs
 * once. Renewal ends when the handler finishes, when the claim turns out to be lost, or after `handlerTimeout`:
 * then the handler is abandoned (its signal aborts) and the message is taken over once the lease expires.
 */
export class Lease {
  private readonly controller = new AbortController()
  private timer: NodeJS.Timeout | undefined
  private deadline: NodeJS.Timeout | undefined
  private active = false
  private failures = 0
  private giveUp: () => void = () => {}
  /** Resolves when the handler ran longer than `handlerTimeout`: the runner stops waiting for it. */
  readonly abandoned = new Promise<void>(resolve => (this.giveUp = resolve))

  constructor(
    readonly claim: Claim,
    private readonly timeout: number,
    private readonly handlerTimeout: number,
    private readonly store: Store
  ) {}

  /** Aborted on shutdown (after the grace period), on lease loss and after `handlerTimeout`. */
  get signal(): AbortSignal {
    return this.controller.signal
  }

  start(): void {
    this.active = true
    this.schedule(this.interval)
    this.deadline = setTimeout(() => {
      this.abort(new AttemptAborted(`Message ${this.claim.ID}: its handler did not finish within handlerTimeout (${this.handlerTimeout} ms)`, 'HANDLER_TIMEOUT'))
      this.giveUp()
    }, this.handlerTimeout).unref()
  }

  /** Ends renewal and aborts the handler's signal with `reason`. */
  abort(reason: AttemptAborted): void {
    this.stop()
    if (!this.controller.signal.aborted) this.controller.abort(reason)
  }

  /** Ends renewal; the lease then runs out unless the claim is completed or handed back. */
  stop(): void {
    this.active = false
    clearTimeout(this.timer)
    clearTimeout(this.deadline)
  }

  private get interval(): number {
    return Math.max(1, Math.floor(this.timeout / 3))
  }

  private schedule(delay: number): void {
    if (this.active) this.timer = setTimeout(() => void this.renew(), delay).unref()
  }

  private async renew(): Promise<void> {
    let held: boolean
    try {
      // Detached from whichever context the timer fired in: a renewal is a transaction of its own.
      cds.context = undefined
      held = await inOwnTransaction(() => this.store.renew(this.claim, Date.now() + this.timeout))
    } catch (e) {
      this.failures++
      LOG.warn(`could not renew the lease of message ${this.claim.ID} (${this.failures}x); retrying:`, e)
      return this.schedule(Math.min(this.interval, RETRY_RENEWAL))
    }
    if (this.failures) LOG.info(`renewed the lease of message ${this.claim.ID} again after ${this.failures} failures`)
    this.failures = 0
    // A renewal racing the handler's own completion finds the row gone: only a running handler has lost its claim.
    if (!this.active) return
    if (held) return this.schedule(this.interval)
    LOG.warn(`message ${this.claim.ID}: its claim was taken over or the row deleted while the handler ran; aborting the handler`)
    this.abort(new AttemptAborted(`Message ${this.claim.ID}: the claim was lost while the handler ran`, 'LEASE_LOST'))
  }
}
