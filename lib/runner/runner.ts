import cds from '@sap/cds'
import { randomBytes } from 'crypto'
import { hostname } from 'os'
import { Watchers } from '../cap/handlers'
import type { MessageRow, QueueSettings } from '../interfaces'
import type { QueueRegistry } from '../queues'
import type { Settings } from '../settings'
import { inOwnTransaction, type QueueStore } from '../store'
import { storeFor, usesPortableStore } from '../store/choose'
import { watchBatchConnections } from './batch-connections'
import { AttemptAborted, type Lease } from './lease'
import { Gates } from './gates'
import { Loop, type ClaimStatus } from './loop'
import { Monitor } from './monitor'
import { Notifier } from './notifier'
import { runSlot } from './slot'
import { Slots } from './slots'
import { metaTenant } from '../cap/mtxs'
import { groupBy } from '../group-by'
import { TenantRegister } from '../tenants/register'
import { Tenants, type Tenant } from '../tenants/tenants'
import { clock } from '../time/clock'
import { LOG } from '../log'

/**
 * The background runner's lifecycle: it starts when the app is served (sweeping what earlier processes left), claims
 * and runs due messages in its slots (loop.ts, slot.ts), and stops gracefully on shutdown. Claims are short
 * transactions of their own; no lock is held while handlers run.
 */
export class Runner {
  /** Who claims: recorded in `claimedBy`, so an operator sees which process holds a message. */
  readonly owner = `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`
  readonly monitor = new Monitor()
  slots: Slots
  readonly leases = new Set<Lease>()
  /** Messages claimed at enqueue that have not started yet (see reservations.ts). */
  readonly reserved = new Set<string>()
  readonly abandoned = new Set<string>()
  /** Rate limits and circuit breakers of the queues, in this process. */
  readonly gates = new Gates(() => this.wake())
  readonly queues: QueueRegistry
  /** The tenants whose messages this process runs (one database where the app is not multitenant). */
  readonly tenants: Tenants
  private loop: Loop
  private readonly inFlight = new Set<Promise<void>>()
  private storeInstance: QueueStore | undefined
  private watchers: Watchers | undefined
  private notifier: Notifier | undefined
  private stopped: Promise<void> | undefined
  started = false
  stopping = false

  constructor(private readonly settings: Settings) {
    const { concurrency, batchSize } = settings.runner
    this.queues = settings.queues
    const t0 = metaTenant()
    this.tenants = new Tenants(t0 === undefined ? undefined : new TenantRegister(t0, settings.appid, settings.runner.pollInterval), settings.runner.pollInterval)
    this.slots = new Slots(concurrency, batchSize)
    this.loop = new Loop(this, settings.runner)
  }

  /** The store needs the database, known only once `cds.db` is connected (see store/choose.ts). */
  get store(): QueueStore {
    if (!cds.db) throw new Error('cds-event-queues: no database connected (cds.db) for the persistent queue')
    return (this.storeInstance ??= storeFor(this.settings.runner.store, cds.db, this.settings.appid, this.watchers))
  }

  /**
   * The database service connected: what handlers it has now are its own (see `Watchers`). A `store` option that
   * does not fit the primary database fails its connect, so the app does not start.
   */
  connected(db: cds.DatabaseService): void {
    if (db === cds.db || !this.watchers) this.watchers = new Watchers(db)
    watchBatchConnections(db)
    if (db !== cds.db && cds.db) return
    const portable = usesPortableStore(this.settings.runner.store, db)
    LOG._debug && LOG.debug(`database ${db.kind}: the ${portable ? 'portable' : 'native'} store runs the queue`)
    // Without savepoints a transaction runs one message, so a slot takes one (batchSize 1), as before it starts.
    if (portable && !this.started && this.settings.runner.batchSize > 1) {
      const runner = { ...this.settings.runner, batchSize: 1 }
      this.slots = new Slots(runner.concurrency, 1)
      this.loop = new Loop(this, runner)
    }
  }

  /** Claims take the default queue's lease; queues with a `timeout` of their own adjust it before they run. */
  get claimLease(): number {
    return this.queues.defaultQueue.timeout
  }

  /** Handlers run, or committed messages claimed at enqueue are about to. */
  get busy(): boolean {
    return this.inFlight.size > 0 || this.slots.awaitingStart
  }

  get running(): boolean {
    return this.started && !this.stopping
  }

  /** How claiming goes (see `Loop.claims`). */
  get claims(): ClaimStatus {
    return this.loop.claims
  }

  /** Starts periodic processing and sweeps what earlier processes left. */
  async start(): Promise<void> {
    if (this.started || !cds.db) return
    this.started = true
    this.stopping = false
    this.stopped = undefined
    try {
      // a multitenant app's provider database has no queue table: each tenant's indexes are checked at its first look
      if (!this.tenants.multitenant) await this.store.ensureIndexes()
    } catch (e) {
      // A database unreachable at start must not leave the runner dead: claims back off until it is back.
      LOG.warn('could not check the indexes of the queue table; claims work without them, but slower:', e)
    }
    // Stopped while the indexes were checked (a test's teardown, a failed start): nothing may start after the stop.
    if (this.stopping || !this.started) return
    const listen = this.store.listenStatement
    if (listen) {
      this.notifier = new Notifier(listen, () => this.wake())
      this.notifier.start()
    }
    LOG._debug && LOG.debug(`runner ${this.owner} started`)
    // What earlier processes left, in every tenant: once at start; later, markers say which tenants have messages.
    try {
      await this.tenants.wantAll()
    } catch (e) {
      LOG.warn('could not read the subscribed tenants; only tenants with markers or new messages are looked into:', e)
    }
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

  /** Stops when CAP disconnects the database, before the connections running handlers need are gone. */
  get stopsWithDatabase(): boolean {
    return this.started || !!this.stopped
  }

  private async shutdown(): Promise<void> {
    this.stopping = true
    this.started = false
    this.loop.stop()
    this.gates.stop()
    const notifier = this.notifier
    this.notifier = undefined
    await notifier?.stop()
    const grace = new Promise<void>(resolve => setTimeout(resolve, this.settings.runner.shutdownGrace).unref())
    await Promise.race([Promise.allSettled([...this.inFlight]), grace])
    await this.handBackRunning()
    await this.storeInstance?.close()
    this.storeInstance = undefined
    this.loop.stop()
  }

  /**
   * Aborts the handlers still running after the grace period and hands their messages back, with the messages of
   * their batches that have not started (those a batch already handed back are no longer held). Each release is
   * guarded by the claim, so it never undoes a completion that committed meanwhile (that row is gone or no longer ours).
   */
  private async handBackRunning(): Promise<void> {
    const leases = [...this.leases]
    const running = leases.filter(l => l.started)
    const waiting = leases.filter(l => !l.started && !l.signal.aborted)
    if (running.length + waiting.length === 0) return
    const rest = waiting.length ? ` and ${waiting.length} messages of their batches that had not started` : ''
    LOG.warn(`${running.length} handlers still running after the shutdown grace period of ${this.settings.runner.shutdownGrace} ms: aborting them and handing back their messages${rest}`)
    for (const lease of [...running, ...waiting]) lease.abort(new AttemptAborted('The process is shutting down', 'SHUTDOWN'))
    try {
      let [fromRunning, fromWaiting] = [0, 0]
      for (const [tenant, leases] of groupBy([...running, ...waiting], l => l.tenant)) {
        await this.tenants.run(tenant, () =>
          inOwnTransaction(async () => {
            fromRunning += await this.store.release(leases.filter(l => l.started).map(l => l.claim), new Date(clock.now()))
            fromWaiting += await this.store.release(leases.filter(l => !l.started).map(l => l.claim), new Date(clock.now()))
          })
        )
      }
      // An aborted handler's own slot hands its message back too, racing this release: which of the two did it, or
      // whether the row completed or was taken over first, is not known here.
      const gone = running.length - fromRunning + (waiting.length - fromWaiting)
      const meanwhile = gone ? `; ${gone} were no longer claimed by this process (handed back by their aborted handler's slot, completed or taken over)` : ''
      LOG.info(`handed back ${fromRunning + fromWaiting} messages (${fromRunning} of running handlers, ${fromWaiting} not started)${meanwhile}`)
    } catch (e) {
      LOG.error(`could not hand back ${running.length + waiting.length} messages at shutdown; they are taken over when their leases expire:`, e)
    }
  }

  /**
   * Processes due messages soon, in `tenants` besides those that want a look anyway (a commit there enqueued, a slot
   * of theirs finished; none: a poll, a notification); cheap to call often (calls while a pass runs fold into one
   * more pass).
   */
  wake(...tenants: Tenant[]): void {
    for (const tenant of tenants) this.tenants.want(tenant)
    this.loop.wake()
  }

  /** Resolves once nothing processable is left; keeps the process alive meanwhile. */
  flush(): Promise<void> {
    return this.loop.flush()
  }

  /** Runs claimed rows of one queue in a slot (`claimedBy` other than the owner: a reserved message, see reservations.ts). */
  run(queue: QueueSettings, rows: MessageRow[], claimedBy = this.owner, reserved = false): void {
    this.slots.take(queue)
    const tenant = cds.context?.tenant
    const done = runSlot(this, queue, rows, claimedBy, reserved).finally(() => {
      this.inFlight.delete(done)
      // Also after a reserved message: a pass that found it running skipped planning the next due time, and its
      // handler may have queued a callback.
      if (this.slots.give(queue)) this.wake(tenant)
    })
    this.inFlight.add(done)
  }

  /**
   * Rows that will not run here after all go back unstarted, due again at their claim time: those of a queue whose
   * limit a claim overshot, the rest of a batch behind a slow handler, reserved ones that cannot run now.
   */
  async handBack(rows: MessageRow[], claimedBy: string): Promise<void> {
    try {
      await inOwnTransaction(() => this.store.release(rows.map(row => ({ ID: row.ID, claimedBy, claimedAt: row.claimedAt }))))
    } catch (e) {
      LOG.warn(`could not hand back ${rows.length} unstarted messages; they run when their leases expire:`, e)
    }
  }
}
