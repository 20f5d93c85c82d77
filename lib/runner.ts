import cds from '@sap/cds'
import { hostname } from 'os'
import { randomBytes } from 'crypto'
import { DEFAULT_QUEUE, optionsFor, resolveRunnerOptions } from './config'
import { attempt, logOutcome } from './dispatch'
import { Notifier } from './notifier'
import { recordOutcome } from './outcomes'
import { inOwnTransaction, Store } from './store'
import type { MessageRow, RunnerOptions } from './interfaces'

const LOG = cds.log('queue')

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
    await this.store.ensureIndexes()
    const listen = this.store.listenStatement
    if (listen) {
      this.notifier = new Notifier(listen, () => this.wake())
      this.notifier.start()
    }
    LOG._debug && LOG.debug(`runner ${this.owner} started`)
    this.wake()
  }

  /** Stops claiming and waits for running handlers, up to the configured grace period. */
  async stop(): Promise<void> {
    this.stopping = true
    this.started = false
    clearTimeout(this.timer)
    const notifier = this.notifier
    this.notifier = undefined
    await notifier?.stop()
    const grace = new Promise<void>(resolve => setTimeout(resolve, this.opts.shutdownGrace).unref())
    await Promise.race([Promise.allSettled([...this.inFlight]), grace])
    this.storeInstance = undefined
    this.options = undefined
    for (const resolve of this.idleWaiters.splice(0)) resolve()
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
    const { concurrency, chunkSize } = this.opts
    while (!this.stopping && this.inFlight.size < concurrency) {
      let rows: MessageRow[]
      try {
        rows = await this.claim(Math.min(chunkSize, concurrency - this.inFlight.size))
      } catch (e) {
        return this.claimFailed(e)
      }
      if (this.claimFailures) LOG.info(`database reachable again after ${this.claimFailures} failed claims`)
      this.claimFailures = 0
      if (rows.length === 0) return
      for (const row of rows) this.run(row)
    }
  }

  private async claim(limit: number): Promise<MessageRow[]> {
    // A claim reads back its rows by (owner, claimedAt): two claims in one millisecond would also get each other's.
    const now = (this.lastClaimAt = Math.max(Date.now(), this.lastClaimAt + 1))
    return inOwnTransaction(() => this.store.claim(this.owner, now, now + this.leaseFor(), limit))
  }

  /** Claims take the default queue's lease; queues with a `timeout` of their own adjust it before dispatch. */
  private leaseFor(): number {
    return optionsFor(DEFAULT_QUEUE).timeout
  }

  private run(row: MessageRow): void {
    const claim = { ID: row.ID, claimedBy: this.owner, claimedAt: row.claimedAt }
    const done = (async () => {
      const { timeout } = optionsFor(row.target)
      if (timeout !== this.leaseFor()) await inOwnTransaction(() => this.store.renew(claim, row.claimedAt + timeout))
      const { outcome, message } = await attempt(row, claim, this.store)
      logOutcome(row, outcome)
      await recordOutcome(row, claim, outcome, message, this.store)
    })()
      .catch(e => LOG.error(`${row.target}: could not record the outcome of message ${row.ID}; its lease will expire:`, e))
      .finally(() => {
        this.inFlight.delete(done)
        // Refill in batches, not per message: a claim per finished message would double the statements.
        if (this.inFlight.size <= this.opts.concurrency / 2) this.wake()
      })
    this.inFlight.add(done)
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
      next = await inOwnTransaction(() => this.store.nextDue())
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

export const runner = new Runner()
