import cds from '@sap/cds'
import { setImmediate as yielded } from 'timers/promises'
import { groupBy } from '../group-by'
import type { MessageRow, QueueSettings } from '../interfaces'
import type { QueueRegistry } from '../queues'
import { inOwnTransaction, type QueueStore } from '../store'
import { readDatabaseClock } from '../store/database-time'
import { brokerWaits } from './broker-waits'
import type { Gates } from './gates'
import type { Holdings } from './holdings'
import type { Monitor } from './monitor'
import { describe, type Tenant, type Tenants } from '../tenants/tenants'
import { detached } from '../telemetry/spans'
import { clock } from '../time/clock'
import { LOG } from '../log'

/** What the loop needs of the runner it drives. */
export interface LoopHost {
  readonly store: QueueStore
  readonly owner: string
  readonly monitor: Monitor
  /** Its slots, what they hold, and the hand-back of claimed rows that do not fit. */
  readonly holdings: Holdings
  readonly gates: Gates
  readonly queues: QueueRegistry
  readonly tenants: Tenants
  /** The lease every claim takes (the default queue's `timeout`). */
  readonly claimLease: number
  /** Started and not stopping: timers may be planned. */
  readonly started: boolean
  readonly stopping: boolean
  /** Handlers are running. */
  readonly busy: boolean
  /** Processing is on hold (`Runner.hold`): nothing is claimed. */
  readonly onHold: boolean
  /** Runs claimed rows of one queue in a slot. */
  run(queue: QueueSettings, rows: MessageRow[]): void
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
 * another process), by a timer for the next due row, and by polling. A pass claims while slots are free, in the
 * tenants that want a look (tenants.ts; the one database of a single tenant app), a share of the free slots each in
 * turn; calls while a pass runs fold into one more pass. Nothing here ends in an unhandled rejection: a failing pass
 * is logged and the next one planned.
 */
export class Loop {
  private pumping = false
  private again = false
  private timer: NodeJS.Timeout | undefined
  private lastClaimAt = 0
  /** When each tenant was last reconciled (see `reconcile`). */
  private readonly reconciledAt = new Map<Tenant, number>()
  /** When the database's clock was last read (see `reconcile`): once per poll interval, whatever the tenants. */
  private clockReadAt = 0
  /** The tenants looked into since the last idle time, with when (for `idle`). */
  private readonly looked = new Map<Tenant, number>()
  private lastClaimSucceededAt: number | undefined
  private idleWaiters: (() => void)[] = []
  /** Tenants whose indexes were checked in this process (a tenant's database gets them at its first look). */
  private readonly indexed = new Set<Tenant>()

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
      this.reconciledAt.clear()
      await this.host.tenants.wantAll()
      this.wake()
      await idle
    } finally {
      clearInterval(keepAlive)
    }
  }

  /** How claiming goes, for the health check: when a claim last succeeded, and how many failed since. */
  get claims(): ClaimStatus {
    return { lastSucceededAt: this.lastClaimSucceededAt, failures: this.host.tenants.failedClaims }
  }

  /** No more passes: the timer is cleared and whoever waits in `flush()` is released. */
  stop(): void {
    clearTimeout(this.timer)
    for (const resolve of this.idleWaiters.splice(0)) resolve()
  }

  private async pump(): Promise<void> {
    let failed: unknown
    const { tenants } = this.host
    try {
      await tenants.refresh(clock.now()).catch(e => LOG.warn('could not read which tenants have messages; next time:', e))
      do {
        this.again = false
        const round = tenants.round(clock.now())
        for (const tenant of round) {
          if (tenants.gone(tenant)) continue // unsubscribed since the round was made: its database is not opened again
          if (tenants.multitenant && !this.indexed.has(tenant)) await this.ensureIndexes(tenant)
          await tenants.run(tenant, () => this.reconcile(tenant)).catch(e => LOG.warn('could not reconcile the queue table with what others wrote; next time:', e))
          await this.host.gates.refresh(tenant)
        }
        await this.claimWhileFree(round)
      } while (this.again && !this.host.stopping)
    } catch (e) {
      failed = e
    } finally {
      this.pumping = false
    }
    try {
      if (failed) throw failed
      // `plan` sets no timer while a pass runs: the next pass (also after a failed claim's backoff) is planned here
      if (!this.host.busy && !this.host.stopping) await this.idle()
    } catch (e) {
      LOG.error('a pass of the queue runner failed; the next one is planned:', e)
      this.plan(this.limits.pollInterval)
    }
  }

  /**
   * Claims in the tenants of `round` while slots are free: each in turn, with its share of the free slots, until
   * each has nothing more due. A tenant whose claim fails is skipped until its backoff ends; the others go on.
   */
  private async claimWhileFree(round: Tenant[]): Promise<void> {
    const { tenants } = this.host
    const { slots } = this.host.holdings
    let active = round
    while (!this.host.stopping && !this.host.onHold && slots.free > 0 && active.length) {
      const more: Tenant[] = []
      for (const [i, tenant] of active.entries()) {
        if (this.host.stopping || slots.free === 0) break
        if (tenants.gone(tenant)) continue
        this.looked.set(tenant, this.looked.get(tenant) ?? clock.now())
        const share = Math.max(1, Math.floor(slots.free / (active.length - i)))
        const { limit, bytes, full } = slots.claimBounds(this.limits.chunkSize, share)
        // the slots hold `maxClaimBytes` already: a finishing slot wakes the loop again
        if (bytes === 0) return
        const skip = [...full, ...this.host.gates.shut(tenant, this.host.queues.all())]
        let rows: MessageRow[]
        try {
          rows = await tenants.run(tenant, () => this.claim(limit, bytes, skip))
        } catch (e) {
          tenants.claimFailed(tenant, e) // the pass after its backoff is planned when this one ends (see idle)
          continue
        }
        tenants.claimed(tenant, rows.length)
        this.lastClaimSucceededAt = clock.now()
        // unsubscribed while the claim ran: the rows are gone with the tenant's database, nothing is written there
        if (rows.length === 0 || tenants.gone(tenant)) continue
        this.host.monitor.emit('claimed', { count: rows.length })
        await tenants.run(tenant, () => this.distribute(tenant, rows))
        more.push(tenant)
      }
      active = more
    }
  }

  /**
   * Starts the claimed rows in free slots, spread over them: a batch only when there are more messages than slots,
   * and never for a gated queue (paused, rate limit, circuit breaker), whose starts are counted one handler call each
   * and admitted by its gates first. Rows that do not fit go back unstarted (a queue whose limit a claim overshot: its
   * first rows in this process, nothing bounded the claim yet; what its gate does not let start now), and so does
   * everything not started if starting fails.
   */
  private async distribute(tenant: Tenant, rows: MessageRow[]): Promise<void> {
    const { holdings, queues, gates } = this.host
    const { slots } = holdings
    const started = new Set<MessageRow>()
    try {
      for (const [target, claimed] of groupBy(rows, row => row.target)) {
        const queue = queues.forTarget(target)
        const gated = gates.gated(tenant, queue)
        const perSlot = gated ? 1 : this.limits.batchSize
        let allowed = gated ? await gates.admit(tenant, queue, Math.min(claimed.length, slots.freeFor(queue) * perSlot)) : Infinity
        const start = (batch: MessageRow[]) => {
          this.host.run(queue, batch)
          gates.started(tenant, queue)
          allowed -= batch.length
          for (const row of batch) started.add(row)
        }
        // A row interrupted before runs alone, in a slot of its own, at once (see the claim's statement).
        for (const row of claimed.filter(r => r.interrupted > 0)) {
          if (slots.freeFor(queue) === 0 || allowed <= 0) break
          start([row])
        }
        const free = slots.freeFor(queue)
        const ready = claimed.filter(r => r.interrupted === 0).slice(0, Math.min(free * perSlot, allowed))
        const size = Math.ceil(ready.length / Math.min(free, ready.length))
        for (let i = 0; i < ready.length; i += size) start(ready.slice(i, i + size))
      }
    } finally {
      const over = rows.filter(row => !started.has(row))
      if (over.length) await holdings.handBack(over, this.host.owner)
    }
  }

  private async claim(limit: number, bytes: number, skipTargets: string[]): Promise<MessageRow[]> {
    // Never a claim by the process's own clock: the reconciliation that reads the database's may have failed, or not
    // run yet. A claim then takes over leases that are not over (and its time would hold lastClaimAt ahead).
    if (!clock.read) await this.readClock()
    // A claim reads back its rows by (owner, claimedAt): two claims in one millisecond would also get each other's.
    const now = (this.lastClaimAt = Math.max(clock.now(), this.lastClaimAt + 1))
    const { store, owner, claimLease } = this.host
    // the events of a service whose broker this process waits for stay in the table (but for a probe that is due)
    return inOwnTransaction(() => store.claim(owner, now, now + claimLease, limit, skipTargets, bytes, brokerWaits.skipped(now)))
  }

  /** Reads the database's clock (lib/time/clock.ts), in the current tenant's database. */
  private async readClock(): Promise<void> {
    clock.adjust(await inOwnTransaction(() => readDatabaseClock(cds.db)))
    this.clockReadAt = clock.now()
  }

  private async ensureIndexes(tenant: Tenant): Promise<void> {
    this.indexed.add(tenant)
    try {
      await this.host.tenants.run(tenant, () => this.host.store.ensureIndexes())
    } catch (e) {
      LOG.warn(`could not check the indexes of the queue table in ${describe(tenant)}; claims work without them, but slower:`, e)
    }
  }

  /**
   * Brings the table's index columns in line with CAP's columns where others wrote them (see NativeStore.reconcile), and
   * hands back rows claimed in this process's name that it holds no record of (a copy of a row re-inserted from a
   * backup, say): at most once per poll interval, at the start of a pass (no claim of this loop is under way). Reads
   * the database's clock first (lib/time/clock.ts), in the first tenant reconciled in a poll interval: the tenants'
   * databases share one server, and the provider's database has no queue table for CQL to read the clock with.
   */
  private async reconcile(tenant: Tenant): Promise<void> {
    if (!this.host.started || clock.now() - (this.reconciledAt.get(tenant) ?? 0) < this.limits.pollInterval) return
    if (clock.now() - this.clockReadAt >= this.limits.pollInterval) await this.readClock()
    const now = clock.now()
    this.reconciledAt.set(tenant, now)
    const { store, queues, claimLease, owner } = this.host
    const { changed, orphans } = await inOwnTransaction(async () => {
      const changed = await store.reconcile(queues.attemptLimits(), now, claimLease)
      const orphans = this.host.holdings.orphans(await store.claimsOf([owner, `${owner}:enqueued`]), now, tenant)
      if (orphans.length) await store.release(orphans, new Date(now))
      return { changed, orphans }
    })
    const parked = await this.park()
    if (orphans.length) LOG.info(`handed back ${orphans.length} messages claimed in this process's name that it does not hold (rows restored from a copy?)`)
    if (changed + parked + orphans.length) LOG._debug && LOG.debug(`reconciled ${changed + parked} rows written by others, handed back ${orphans.length}`)
  }

  /**
   * Parks every keyed row others wrote behind an earlier message of its key before this pass claims, however
   * many: a bounded statement per transaction, yielding in between (SQLite's single writer serves the app's own
   * transactions meanwhile). Parked 1,000 per poll interval, a bulk import of 40,000 stayed in the claim's range
   * for 39 more intervals, and every claim walked it.
   */
  private async park(): Promise<number> {
    let parked = 0
    for (;;) {
      const batch = await inOwnTransaction(() => this.host.store.park())
      parked += batch.parked
      if (!batch.more || this.host.stopping) return parked
      await yielded()
    }
  }

  /**
   * Nothing to claim and nothing running: tell flush() and plan the next pass, at the next due time of the tenants
   * looked into (the others have no marker or their next due time is known).
   */
  private async idle(): Promise<void> {
    const { tenants } = this.host
    // While claims fail (the database is down), nothing is known to be processed: flush() waits, the backoff plans.
    const failing = tenants.failing
    if (!failing) for (const resolve of this.idleWaiters.splice(0)) resolve()
    if (!this.host.started) return void (failing || this.host.monitor.emit('idle', { next: undefined }))
    // on hold, due rows would plan the next pass at once, again and again: the release wakes the runner instead
    if (this.host.onHold) return
    const looked = [...this.looked]
    this.looked.clear()
    for (const [tenant, since] of looked) {
      if (tenants.failedIn(tenant) || tenants.gone(tenant)) continue // its database is down (its backoff plans the next look), or gone
      // a queue its gate shut has a timer of its own (see Gates.shut): its rows must not wake the loop at once
      const shut = this.host.gates.shut(tenant, this.host.queues.all())
      try {
        const next = await tenants.run(tenant, () => inOwnTransaction(() => this.host.store.nextDue(this.lastClaimAt, shut)))
        await tenants.settled(tenant, next, since)
      } catch (e) {
        LOG.warn('could not read the next due time; polling instead:', e)
      }
    }
    const poll = this.limits.pollInterval
    const next = tenants.earliest()
    const delay = next === undefined ? poll : Math.max(0, Math.min(poll, next - clock.now()))
    this.plan(delay)
    if (!failing) this.host.monitor.emit('idle', { next: delay })
  }

  /** Timers are capped at the poll interval: no 32-bit overflow for far-future messages, and they never hold the process. */
  private plan(delay: number): void {
    if (this.host.stopping || this.pumping) return
    clearTimeout(this.timer)
    this.timer = setTimeout(() => this.wake(), delay).unref()
  }
}
