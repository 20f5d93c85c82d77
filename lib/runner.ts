import cds from '@sap/cds'
import { hostname } from 'os'
import { randomBytes } from 'crypto'
import { DEFAULT_QUEUE, optionsFor, resolveRunnerOptions } from './config'
import { attemptBatch, type AttemptResult, type BatchEntry } from './batch'
import { attempt, logOutcome } from './dispatch'
import { AttemptAborted, Lease, Renewals } from './lease'
import { groupBy } from './group-by'
import { Notifier } from './notifier'
import { recordOutcome } from './outcomes'
import { inOwnTransaction, Store } from './store'
import type { MessageRow, Outcome, RunnerOptions } from './interfaces'

/** A slot reserved for a message being enqueued (see `Runner.reserve`). */
export interface Reservation {
  claimedBy: string
  claimedAt: number
  leaseUntil: number
}

const LOG = cds.log('queue')

/**
 * A batch's messages that have not started after this long go back to the queue (see `Runner.handBackRest`): a
 * batch of fast handlers is done long before; behind a slow one, they would wait.
 */
const SLOT_TIME = 1000

/** Upper bound for the pause after a failed claim (database outage): short enough to recover quickly. */
const MAX_CLAIM_BACKOFF = 30_000

/**
 * The background runner: claims due rows and dispatches them, woken right after a commit that enqueued, by a timer
 * for the next due row, by periodic polling (rows from other processes), and at startup (rows left by a previous
 * run). Claims are short transactions of their own; no lock is held while handlers run.
 */
export class Runner {
  /** Who claims: recorded in `claimedBy`, so an operator sees which process holds a message. */
  readonly owner = `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`
  private options: RunnerOptions | undefined
  private storeInstance: Store | undefined
  private inFlight = new Set<Promise<void>>()
  /**
   * Slots in use: a slot runs one message, or a batch of a backlog's messages one after another, so at most
   * `concurrency` handlers run at once.
   */
  private slots = 0
  /** Slots in use per queue, for the queues' own `concurrency` limits. */
  private slotsPerQueue = new Map<string, number>()
  /** The claims of running handlers: renewed while they run, handed back if they are still running at shutdown. */
  private leases = new Set<Lease>()
  /** Slots promised to messages enqueued in open transactions of this process (see `reserve`). */
  private reserved = 0
  private stopped: Promise<void> | undefined
  private pumping = false
  private again = false
  private started = false
  private stopping = false
  private timer: NodeJS.Timeout | undefined
  private claimFailures = 0
  private idleWaiters: (() => void)[] = []
  private lastClaimAt = 0
  private notifier: Notifier | undefined

  private get opts(): RunnerOptions {
    return (this.options ??= resolveRunnerOptions())
  }

  /** The store needs the database kind, known only once `cds.db` is connected. */
  get store(): Store {
    if (!cds.db) throw new Error('cds-event-queues: no database connected (cds.db) for the persistent queue')
    return (this.storeInstance ??= new Store(cds.db.kind, cds.env.appid as string | undefined))
  }

  /** Starts periodic processing and sweeps what earlier processes left. */
  async start(): Promise<void> {
    if (this.started || !cds.db) return
    this.options = resolveRunnerOptions()
    this.started = true
    this.stopping = false
    this.stopped = undefined
    try {
      await this.store.ensureIndexes()
    } catch (e) {
      // A database unreachable at start must not leave the runner dead: claims back off until it is back.
      LOG.warn('could not check the indexes of the queue table; claims work without them, but slower:', e)
    }
    const listen = this.store.listenStatement
    if (listen) {
      this.notifier = new Notifier(listen, () => this.wake())
      this.notifier.start()
    }
    LOG._debug && LOG.debug(`runner ${this.owner} started`)
    this.wake()
  }

  /**
   * Graceful shutdown: stops claiming, lets running handlers finish within `shutdownGrace`, then aborts their signals
   * and hands their messages back, so another instance takes them over at once instead of after the lease.
   * Idempotent: every caller waits for the same shutdown.
   */
  stop(): Promise<void> {
    return (this.stopped ??= this.shutdown())
  }

  private async shutdown(): Promise<void> {
    this.stopping = true
    this.started = false
    clearTimeout(this.timer)
    const notifier = this.notifier
    this.notifier = undefined
    await notifier?.stop()
    const grace = new Promise<void>(resolve => setTimeout(resolve, this.opts.shutdownGrace).unref())
    await Promise.race([Promise.allSettled([...this.inFlight]), grace])
    if (this.leases.size) await this.handBackRunning()
    this.storeInstance = undefined
    this.options = undefined
    for (const resolve of this.idleWaiters.splice(0)) resolve()
  }

  /**
   * Aborts the handlers still running after the grace period and hands their messages back. Each release is guarded
   * by the claim, so it never undoes a completion that committed meanwhile (that row is gone or no longer ours).
   */
  private async handBackRunning(): Promise<void> {
    const leases = [...this.leases]
    LOG.warn(`${leases.length} handlers still running after the shutdown grace period of ${this.opts.shutdownGrace} ms: aborting them and handing their messages back`)
    for (const lease of leases) lease.abort(new AttemptAborted('The process is shutting down', 'SHUTDOWN'))
    try {
      const now = new Date()
      const released = await inOwnTransaction(async () => {
        let n = 0
        for (const { claim } of leases) if (await this.store.release(claim, now)) n++
        return n
      })
      LOG.info(`handed back ${released} messages; ${leases.length - released} had completed meanwhile`)
    } catch (e) {
      LOG.error(`could not hand back ${leases.length} messages at shutdown; they are taken over when their leases expire:`, e)
    }
  }

  /**
   * CAP disconnects databases on 'shutdown' at the same moment it stops the runner, destroying the connections of
   * running handlers; they need them until they finish or are handed back, so the disconnect waits for the runner.
   */
  stopsBefore(db: cds.DatabaseService): void {
    const service = db as unknown as { disconnect(tenant?: string): Promise<void> }
    const disconnect = service.disconnect.bind(service)
    service.disconnect = async (tenant?: string) => {
      if (!tenant && (this.started || this.stopped)) await this.stop()
      return disconnect(tenant)
    }
  }

  /** Processes due messages soon; cheap to call often (calls while a pass runs fold into one more pass). */
  wake(): void {
    if (this.stopping) return
    if (this.pumping) {
      this.again = true
      return
    }
    this.pumping = true
    clearTimeout(this.timer)
    setImmediate(() => {
      // Run detached from whatever request woke us: claims must not inherit its user, tenant or transaction.
      cds.context = undefined
      void this.pump()
    })
  }

  /** Resolves once nothing processable is left; keeps the process alive meanwhile. */
  async flush(): Promise<void> {
    const keepAlive = setInterval(() => {}, 60_000)
    try {
      const idle = new Promise<void>(resolve => this.idleWaiters.push(resolve))
      this.wake()
      await idle
    } finally {
      clearInterval(keepAlive)
    }
  }

  private async pump(): Promise<void> {
    try {
      do {
        this.again = false
        await this.claimWhileFree()
      } while (this.again && !this.stopping)
    } finally {
      this.pumping = false
    }
    if (this.inFlight.size === 0 && !this.stopping) await this.idle()
  }

  private async claimWhileFree(): Promise<void> {
    const { concurrency, chunkSize, batchSize } = this.opts
    while (!this.stopping && this.slots < concurrency) {
      const { limit, full } = this.claimBounds(Math.min(chunkSize, (concurrency - this.slots) * batchSize))
      let rows: MessageRow[]
      try {
        rows = await this.claim(limit, full)
      } catch (e) {
        return this.claimFailed(e)
      }
      if (this.claimFailures) LOG.info(`database reachable again after ${this.claimFailures} failed claims`)
      this.claimFailures = 0
      if (rows.length === 0) return
      const over: MessageRow[] = []
      for (const [target, queued] of groupBy(rows, row => row.target)) {
        const free = Math.min(this.limitOf(target) - (this.slotsPerQueue.get(target) ?? 0), concurrency - this.slots)
        const start = queued.slice(0, Math.max(0, free) * batchSize)
        over.push(...queued.slice(start.length))
        // Spread over the free slots: a batch only when there are more messages than slots.
        const size = Math.ceil(start.length / Math.min(free, start.length))
        for (let i = 0; i < start.length; i += size) this.run(target, start.slice(i, i + size))
      }
      if (over.length) await this.handBackUnstarted(over)
    }
  }

  /**
   * The size of the next claim and the queues it skips: those using all their slots in this process. A queue with
   * some slots left bounds the claim to what they take, since one claim may take all its rows from that queue.
   */
  private claimBounds(limit: number): { limit: number; full: string[] } {
    const full: string[] = []
    for (const [target, used] of this.slotsPerQueue) {
      const free = this.limitOf(target) - used
      if (free <= 0) full.push(target)
      else limit = Math.min(limit, free * this.opts.batchSize)
    }
    return { limit, full }
  }

  /** A queue's limit in this process: its own `concurrency`, within the runner's. */
  private limitOf(target: string): number {
    return Math.min(optionsFor(target).concurrency, this.opts.concurrency)
  }

  /**
   * Rows that will not run here after all go back unstarted, due again at their claim time: those of a queue whose
   * limit a claim overshot (its first rows in this process: nothing bounded the claim yet; a slot of their queue
   * freeing up wakes the runner for them), and reserved ones that cannot run now (see `runReserved`).
   */
  private async handBackUnstarted(rows: MessageRow[], claimedBy = this.owner): Promise<void> {
    try {
      await inOwnTransaction(async () => {
        for (const row of rows) await this.store.release({ ID: row.ID, claimedBy, claimedAt: row.claimedAt }, new Date(row.claimedAt))
      })
    } catch (e) {
      LOG.warn(`could not hand back ${rows.length} unstarted messages; they run when their leases expire:`, e)
    }
  }

  private async claim(limit: number, skipTargets: string[]): Promise<MessageRow[]> {
    // A claim reads back its rows by (owner, claimedAt): two claims in one millisecond would also get each other's.
    const now = (this.lastClaimAt = Math.max(Date.now(), this.lastClaimAt + 1))
    return inOwnTransaction(() => this.store.claim(this.owner, now, now + this.leaseFor(), limit, skipTargets))
  }

  /** Claims take the default queue's lease; queues with a `timeout` of their own adjust it before dispatch. */
  private leaseFor(): number {
    return optionsFor(DEFAULT_QUEUE).timeout
  }

  /**
   * A slot for a message this process is enqueueing: written already claimed, it runs right after its transaction
   * commits, with no claim in between (see `runReserved`). Undefined when every slot is in use or promised, or the
   * runner is not running: the message is then written unclaimed, for the next claim by any process.
   * Reserved claims have an owner of their own, so a claim's read-back by (owner, time) never finds them.
   */
  reserve(target: string): Reservation | undefined {
    if (!this.started || this.stopping) return undefined
    const promised = this.slots + this.reserved
    if (promised >= this.opts.concurrency || (this.slotsPerQueue.get(target) ?? 0) + this.reserved >= this.limitOf(target)) return undefined
    this.reserved++
    const claimedAt = Date.now()
    return { claimedBy: `${this.owner}:enqueued`, claimedAt, leaseUntil: claimedAt + optionsFor(target).timeout }
  }

  /** The transaction that was to commit a reserved message did not. */
  unreserve(): void {
    this.reserved--
  }

  /**
   * Runs a message written with a reserved slot, now that its transaction committed. One whose transaction stayed
   * open for a third of its lease goes back to the queue instead: renewals would start too late to keep the lease.
   */
  runReserved(row: MessageRow, claimedBy: string): void {
    // Detached from the committing request, like a claim pass: its handlers get the message's context only.
    setImmediate(() => {
      cds.context = undefined
      this.reserved--
      const stale = Date.now() - row.claimedAt > optionsFor(row.target).timeout / 3
      if (this.stopping || !this.started || stale) void this.handBackUnstarted([row], claimedBy).then(() => this.wake())
      else this.run(row.target, [row], claimedBy)
    })
  }

  /**
   * Runs claimed rows of one queue in a slot: one alone in its transaction, several as a batch. `claimedBy` other
   * than the runner's owner marks a reserved message (see `reserve`): its lease is already its queue's.
   */
  private run(target: string, rows: MessageRow[], claimedBy = this.owner): void {
    const reserved = claimedBy !== this.owner
    let handBack: NodeJS.Timeout | undefined
    this.slots++
    this.slotsPerQueue.set(target, (this.slotsPerQueue.get(target) ?? 0) + 1)
    const { timeout, handlerTimeout } = optionsFor(target)
    const renewals = new Renewals(timeout, this.store)
    const entries = rows.map(row => {
      const claim = { ID: row.ID, claimedBy, claimedAt: row.claimedAt }
      return { row, claim, lease: new Lease(claim, handlerTimeout, renewals), started: false }
    })
    const done = (async () => {
      // Claimed while shutdown began: hand them back unstarted.
      if (this.stopping) return void (await this.handBackUnstarted(rows, claimedBy))
      if (!reserved && timeout !== this.leaseFor()) {
        const claims = entries.map(e => e.claim)
        await inOwnTransaction(() => this.store.renewAll(claims, rows[0].claimedAt + timeout))
      }
      for (const { lease } of entries) {
        this.leases.add(lease)
        lease.start()
      }
      const batch: BatchEntry[] = entries.map(entry => {
        const { row, claim, lease } = entry
        const start = () => !lease.signal.aborted && (entry.started = true)
        return { row, claim, signal: lease.signal, committed: () => lease.stop(), start }
      })
      if (batch.length > 1) handBack = setTimeout(() => this.handBackRest(entries, claimedBy), SLOT_TIME)
      const results = await Promise.race([this.attempt(batch), ...entries.map(e => e.lease.abandoned)])
      if (!results) {
        LOG.error(`${rows.map(r => `${r.target}: message ${r.ID}`).join(', ')}: did not finish within handlerTimeout; abandoned, taken over when the lease expires`)
        return
      }
      for (const [i, { row, claim, lease }] of entries.entries()) {
        const outcome = interrupted(results[i].outcome, lease.signal)
        logOutcome(row, outcome)
        await recordOutcome(row, claim, outcome, results[i].message, this.store).catch(e =>
          LOG.error(`${row.target}: could not record the outcome of message ${row.ID}; its lease will expire:`, e))
      }
    })()
      .catch(e => LOG.error(`could not run messages ${rows.map(r => r.ID).join(', ')}; their leases will expire:`, e))
      .finally(() => {
        clearTimeout(handBack)
        this.inFlight.delete(done)
        for (const { lease } of entries) {
          lease.stop()
          this.leases.delete(lease)
        }
        this.slots--
        const used = (this.slotsPerQueue.get(target) ?? 1) - 1
        if (used > 0) this.slotsPerQueue.set(target, used)
        else this.slotsPerQueue.delete(target)
        // Refill in batches, not per slot: a claim per finished message would double the statements. A queue held
        // at its own limit refills once half of its slots are free. Also after a reserved message: a pass that found
        // it running skipped planning the next due time, and its handler may have queued a callback.
        if (this.slots <= this.opts.concurrency / 2 || used <= this.limitOf(target) / 2) this.wake()
      })
    this.inFlight.add(done)
  }

  /**
   * Hands back the messages of a batch that have not started after `SLOT_TIME`, so a slow or stuck handler holds up
   * its own message only: they are due again at once, for any free slot of any process.
   */
  private handBackRest(entries: { row: MessageRow; lease: Lease; started: boolean }[], claimedBy: string): void {
    const rest = entries.filter(({ started, lease }) => !started && !lease.signal.aborted)
    if (rest.length === 0) return
    for (const { row, lease } of rest) lease.abort(new AttemptAborted(`Message ${row.ID} was handed back: its slot is busy with a slow handler`, 'HANDED_BACK'))
    void this.handBackUnstarted(rest.map(({ row }) => row), claimedBy).then(() => this.wake())
  }

  private async attempt(entries: BatchEntry[]): Promise<AttemptResult[]> {
    if (entries.length > 1) return attemptBatch(entries, this.store)
    const { row, claim, signal } = entries[0]
    return [await attempt(row, claim, this.store, signal)]
  }

  private claimFailed(error: unknown): void {
    this.claimFailures++
    const delay = Math.min(MAX_CLAIM_BACKOFF, 100 * 2 ** this.claimFailures)
    const log = this.claimFailures === 1 ? LOG.error : LOG.warn
    log(`claiming messages failed (${this.claimFailures}x), retrying in ${delay} ms:`, error)
    this.plan(delay)
  }

  /** Nothing to claim and nothing running: tell flush() and plan the next pass. */
  private async idle(): Promise<void> {
    if (this.claimFailures) return
    for (const resolve of this.idleWaiters.splice(0)) resolve()
    if (!this.started) return
    let next: number | undefined
    try {
      next = await inOwnTransaction(() => this.store.nextDue(this.lastClaimAt))
    } catch (e) {
      LOG.warn('could not read the next due time; polling instead:', e)
    }
    const poll = this.opts.pollInterval
    this.plan(next === undefined ? poll : Math.max(0, Math.min(poll, next - Date.now())))
  }

  /** Timers are capped at the poll interval: no 32-bit overflow for far-future messages, and they never hold the process. */
  private plan(delay: number): void {
    if (this.stopping || this.pumping) return
    clearTimeout(this.timer)
    this.timer = setTimeout(() => this.wake(), delay).unref()
  }
}

/**
 * A message aborted by shutdown, or handed back before it started, was interrupted, not at fault: it goes back
 * without counting an attempt (guarded by the claim, so a hand-back already done or a new owner is left alone).
 */
function interrupted(outcome: Outcome, signal: AbortSignal): Outcome {
  const code = signal.aborted ? (signal.reason as AttemptAborted | undefined)?.code : undefined
  const notAtFault = code === 'SHUTDOWN' || code === 'HANDED_BACK'
  return notAtFault && outcome.kind === 'retry' ? { kind: 'deferred', dueAt: new Date() } : outcome
}

export const runner = new Runner()
