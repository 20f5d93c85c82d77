import cds from '@sap/cds'
import { groupBy } from '../group-by'
import type { Claim, MessageRow, QueueSettings } from '../interfaces'
import type { QueueRegistry } from '../queues'
import { inOwnTransaction, type QueueStore } from '../store'
import type { Monitor } from './monitor'
import type { Slots } from './slots'
import { detached } from '../telemetry/spans'
import { LOG } from '../log'

/** Upper bound for the pause after a failed claim (database outage): short enough to recover quickly. */
const MAX_CLAIM_BACKOFF = 30_000

/** What the loop needs of the runner it drives. */
export interface LoopHost {
  readonly store: QueueStore
  readonly owner: string
  readonly monitor: Monitor
  readonly slots: Slots
  readonly queues: QueueRegistry
  /** The lease every claim takes (the default queue's `timeout`). */
  readonly claimLease: number
  /** Started and not stopping: timers may be planned. */
  readonly started: boolean
  readonly stopping: boolean
  /** Handlers are running. */
  readonly busy: boolean
  /** The claims of running handlers, and the IDs of messages claimed at enqueue that have not started yet. */
  readonly leases: Set<{ claim: Claim }>
  readonly reserved: Set<string>
  readonly abandoned: Set<string>
  /** Runs claimed rows of one queue in a slot. */
  run(queue: QueueSettings, rows: MessageRow[]): void
  handBack(rows: MessageRow[], claimedBy: string): Promise<void>
}

export interface ClaimStatus {
  /** Epoch ms; undefined before the first claim. */
  lastSucceededAt: number | undefined
  /** Claims that failed in a row since (0: the last one succeeded). */
  failures: number
}

interface Limits {
  pollInterval: number
  chunkSize: number
  batchSize: number
}

/**
 * When the runner claims: right after a wake-up (a commit that enqueued, a finished slot, a notification from
 * another process), by a timer for the next due row, and by polling. A pass claims while slots are free; calls
 * while a pass runs fold into one more pass. Nothing here ends in an unhandled rejection: a failing pass is logged
 * and the next one planned.
 */
export class Loop {
  private pumping = false
  private again = false
  private timer: NodeJS.Timeout | undefined
  private claimFailures = 0
  private lastClaimAt = 0
  private lastClaimSucceededAt: number | undefined
  private reconciledAt = 0
  private idleWaiters: (() => void)[] = []

  constructor(
    private readonly host: LoopHost,
    private readonly limits: Limits
  ) {}

  /** Processes due messages soon; cheap to call often. */
  wake(): void {
    if (this.host.stopping) return
    if (this.pumping) {
      this.again = true
      return
    }
    this.pumping = true
    clearTimeout(this.timer)
    setImmediate(() => {
      // Run detached from whatever request woke us: claims must not inherit its user, tenant, transaction or trace.
      cds.context = undefined
      void detached(() => this.pump())
    })
  }

  /** Resolves once nothing processable is left; keeps the process alive meanwhile. */
  async flush(): Promise<void> {
    const keepAlive = setInterval(() => {}, 60_000)
    try {
      const idle = new Promise<void>(resolve => this.idleWaiters.push(resolve))
      // what others changed counts as processable too: reconcile in this pass, whenever the last one was
      this.reconciledAt = 0
      this.wake()
      await idle
    } finally {
      clearInterval(keepAlive)
    }
  }

  /** How claiming goes, for the health check: when a claim last succeeded, and how many failed since. */
  get claims(): ClaimStatus {
    return { lastSucceededAt: this.lastClaimSucceededAt, failures: this.claimFailures }
  }

  /** No more passes: the timer is cleared and whoever waits in `flush()` is released. */
  stop(): void {
    clearTimeout(this.timer)
    for (const resolve of this.idleWaiters.splice(0)) resolve()
  }

  private async pump(): Promise<void> {
    let failed: unknown
    try {
      await this.reconcile().catch(e => LOG.warn('could not reconcile the queue table with what others wrote; next time:', e))
      do {
        this.again = false
        await this.claimWhileFree()
      } while (this.again && !this.host.stopping)
    } catch (e) {
      failed = e
    } finally {
      this.pumping = false
    }
    try {
      if (failed) throw failed
      // planned only now: `plan` sets no timer while a pass runs, so a failed claim alone would wait for a wake-up
      if (this.claimFailures) return this.plan(this.claimBackoff())
      if (!this.host.busy && !this.host.stopping) await this.idle()
    } catch (e) {
      LOG.error('a pass of the queue runner failed; the next one is planned:', e)
      this.plan(this.limits.pollInterval)
    }
  }

  private async claimWhileFree(): Promise<void> {
    const { slots } = this.host
    while (!this.host.stopping && slots.free > 0) {
      const { limit, full } = slots.claimBounds(this.limits.chunkSize)
      let rows: MessageRow[]
      try {
        rows = await this.claim(limit, full)
      } catch (e) {
        return this.claimFailed(e)
      }
      if (this.claimFailures) LOG.info(`database reachable again after ${this.claimFailures} failed claims`)
      this.claimFailures = 0
      this.lastClaimSucceededAt = Date.now()
      if (rows.length === 0) return
      this.host.monitor.emit('claimed', { count: rows.length })
      await this.distribute(rows)
    }
  }

  /**
   * Starts the claimed rows in free slots, spread over them: a batch only when there are more messages than slots.
   * Rows that do not fit go back unstarted (a queue whose limit a claim overshot: its first rows in this process,
   * nothing bounded the claim yet), and so does everything not started if starting fails.
   */
  private async distribute(rows: MessageRow[]): Promise<void> {
    const { slots, queues } = this.host
    const started = new Set<MessageRow>()
    try {
      for (const [target, claimed] of groupBy(rows, row => row.target)) {
        const queue = queues.forTarget(target)
        // A row interrupted before runs alone, in a slot of its own, at once (see the claim's statement).
        for (const row of claimed.filter(r => r.interrupted > 0)) {
          if (slots.freeFor(queue) === 0) break
          this.host.run(queue, [row])
          started.add(row)
        }
        const free = slots.freeFor(queue)
        const start = claimed.filter(r => r.interrupted === 0).slice(0, free * this.limits.batchSize)
        const size = Math.ceil(start.length / Math.min(free, start.length))
        for (let i = 0; i < start.length; i += size) {
          const batch = start.slice(i, i + size)
          this.host.run(queue, batch)
          for (const row of batch) started.add(row)
        }
      }
    } finally {
      const over = rows.filter(row => !started.has(row))
      if (over.length) await this.host.handBack(over, this.host.owner)
    }
  }

  private claim(limit: number, skipTargets: string[]): Promise<MessageRow[]> {
    // A claim reads back its rows by (owner, claimedAt): two claims in one millisecond would also get each other's.
    const now = (this.lastClaimAt = Math.max(Date.now(), this.lastClaimAt + 1))
    const { store, owner, claimLease } = this.host
    return inOwnTransaction(() => store.claim(owner, now, now + claimLease, limit, skipTargets))
  }

  /** Counts a failed claim; the pass ends, and the next comes after `claimBackoff()` (see `pump`). */
  private claimFailed(error: unknown): void {
    this.claimFailures++
    const log = this.claimFailures === 1 ? LOG.error : LOG.warn
    log(`claiming messages failed (${this.claimFailures}x), retrying in ${this.claimBackoff()} ms:`, error)
  }

  private claimBackoff(): number {
    return Math.min(MAX_CLAIM_BACKOFF, 100 * 2 ** this.claimFailures)
  }

  /**
   * Brings the table's index columns in line with CAP's columns where others wrote them (see Store.reconcile), and
   * hands back rows claimed in this process's name that it holds no record of (a copy of a row re-inserted from a
   * backup, say): at most once per poll interval, at the start of a pass (no claim of this loop is under way).
   */
  private async reconcile(): Promise<void> {
    const now = Date.now()
    if (!this.host.started || now - this.reconciledAt < this.limits.pollInterval) return
    this.reconciledAt = now
    const { store, queues, claimLease, owner } = this.host
    const { changed, orphans } = await inOwnTransaction(async () => {
      const changed = await store.reconcile(queues.attemptLimits(), now, claimLease)
      const inOurName = await store.claimsOf([owner, `${owner}:enqueued`])
      const held = new Set([...this.host.leases].map(l => l.claim.ID))
      // Claims made since this pass began are not in `held` yet: only older ones can be orphans.
      const { reserved, abandoned } = this.host
      const orphans = inOurName.filter(c => c.claimedAt < now && !held.has(c.ID) && !reserved.has(c.ID) && !abandoned.has(c.ID))
      if (orphans.length) await store.release(orphans, new Date(now))
      return { changed, orphans }
    })
    if (orphans.length) LOG.info(`handed back ${orphans.length} messages claimed in this process's name that it does not hold (rows restored from a copy?)`)
    if (changed + orphans.length) LOG._debug && LOG.debug(`reconciled ${changed} rows written by others, handed back ${orphans.length}`)
  }

  /** Nothing to claim and nothing running: tell flush() and plan the next pass. */
  private async idle(): Promise<void> {
    for (const resolve of this.idleWaiters.splice(0)) resolve()
    if (!this.host.started) return void this.host.monitor.emit('idle', { next: undefined })
    let next: number | undefined
    try {
      next = await inOwnTransaction(() => this.host.store.nextDue(this.lastClaimAt))
    } catch (e) {
      LOG.warn('could not read the next due time; polling instead:', e)
    }
    const poll = this.limits.pollInterval
    const delay = next === undefined ? poll : Math.max(0, Math.min(poll, next - Date.now()))
    this.plan(delay)
    this.host.monitor.emit('idle', { next: delay })
  }

  /** Timers are capped at the poll interval: no 32-bit overflow for far-future messages, and they never hold the process. */
  private plan(delay: number): void {
    if (this.host.stopping || this.pumping) return
    clearTimeout(this.timer)
    this.timer = setTimeout(() => this.wake(), delay).unref()
  }
}
