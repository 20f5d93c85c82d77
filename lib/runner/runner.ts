import cds from '@sap/cds'
import { randomBytes } from 'crypto'
import { hostname } from 'os'
import { Watchers } from '../cap/handlers'
import type { MessageRow, QueueSettings } from '../interfaces'
import type { QueueRegistry } from '../queues'
import type { Settings } from '../settings'
import type { QueueStore } from '../store'
import { storeFor, usesPortableStore } from '../store/choose'
import { sqliteFile, type DatabaseConfig } from '../store/database-name'
import { markWriter, unmarkWriter } from '../store/sqlite-writers'
import { dialectFor } from '../store/dialects'
import { inOwnTransaction } from '../store'
import { QueueControls } from '../controls/queue-controls'
import { announce } from '../controls/operator'
import { watchBatchConnections } from './batch-connections'
import { brokerWaits } from './broker-waits'
import { Gates } from './gates'
import { Holdings } from './holdings'
import { Loop, type ClaimStatus } from './loop'
import { Monitor } from './monitor'
import { Notifier } from './notifier'
import { Redelivery } from './redelivery'
import { runSlot } from './slot'
import { metaTenant } from '../cap/mtxs'
import { TenantRegister } from '../tenants/register'
import { Tenants, type Tenant } from '../tenants/tenants'
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
  /** Its slots and what they hold: the messages they run, claimed at enqueue, abandoned (see holdings.ts). */
  holdings: Holdings
  /** Pauses, rate limits and circuit breakers of the queues, shared with the other instances (see gates.ts). */
  readonly gates = new Gates(this)
  /** The control rows of the queues, as this process knows them (see controls/queue-controls.ts). */
  readonly controls: QueueControls
  readonly queues: QueueRegistry
  /** The tenants whose messages this process runs (one database where the app is not multitenant). */
  readonly tenants: Tenants
  readonly redelivery: Redelivery | undefined
  private loop: Loop
  private readonly inFlight = new Set<Promise<void>>()
  private storeInstance: QueueStore | undefined
  private watchers: Watchers | undefined
  private notifier: Notifier | undefined
  private stopped: Promise<void> | undefined
  /** The SQLite file this process serves and has marked (sqlite-writers.ts). */
  private sqliteFile: string | undefined
  started = false
  stopping = false
  /** How many holds are in place (see `hold`). */
  private holds = 0

  constructor(private readonly settings: Settings) {
    const { concurrency, batchSize, maxClaimBytes } = settings.runner
    this.queues = settings.queues
    this.redelivery = settings.runner.deliver === 'twice' ? new Redelivery() : undefined
    const t0 = metaTenant()
    const register = t0 === undefined ? undefined : new TenantRegister(t0, settings.appid, settings.runner.pollInterval)
    this.tenants = new Tenants(register, settings.runner.pollInterval, tenant => this.holdings.abandonTenant(tenant))
    this.holdings = new Holdings(concurrency, batchSize, maxClaimBytes, this)
    this.loop = new Loop(this, settings.runner)
    this.controls = new QueueControls(settings.appid, settings.runner.pollInterval, {
      inTenant: (tenant, fn) => this.inTenant(tenant, fn),
      paused: (tenant, queue) => void this.holdings.handBackQueue(tenant, queue)
    })
    brokerWaits.attach({ wake: () => this.wakeAll(), pending: service => this.pendingOf(service), ended: service => this.brokerBack(service) })
  }

  /** Claims soon in every tenant (a broker is back: its events wait in any of them). */
  private wakeAll(): void {
    this.tenants.wantAll().then(() => this.wake(), e => {
      LOG.warn('could not read the subscribed tenants; only tenants with markers or new messages are looked into:', e)
      this.wake()
    })
  }

  /** The messages of `service` (no dead letters) in every tenant this process serves: while it waits, its events. */
  private async pendingOf(service: string): Promise<number> {
    let pending = 0
    const limits = this.queues.attemptLimits()
    for (const tenant of this.tenants.all) pending += await this.inTenant(tenant, () => this.store.aliveOf(service, limits))
    return pending
  }

  /** The broker of `service` is back: its events' waiting marks go, in every tenant; how many are pending. */
  private async brokerBack(service: string): Promise<number> {
    for (const tenant of this.tenants.all) await this.inTenant(tenant, () => this.store.clearWaitingMarks(service))
    return this.pendingOf(service)
  }

  get appid(): string | undefined {
    return this.settings.appid
  }

  /** Runs `fn` in a transaction of its own in `tenant`'s database, as the privileged runner. */
  inTenant<T>(tenant: Tenant, fn: () => Promise<T>): Promise<T> {
    return this.tenants.run(tenant, () => inOwnTransaction(fn))
  }

  /** Tells the other instances that a queue's control row changed, on commit of the current transaction. */
  async announce(): Promise<void> {
    if (this.store.listenStatement) await announce(cds.db)
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
      this.holdings = new Holdings(runner.concurrency, 1, runner.maxClaimBytes, this)
      this.loop = new Loop(this, runner)
    }
  }

  /** Claims take the default queue's lease; queues with a `timeout` of their own adjust it before they run. */
  get claimLease(): number {
    return this.queues.defaultQueue.timeout
  }

  /** Handlers run, or committed messages claimed at enqueue are about to. */
  get busy(): boolean {
    return this.inFlight.size > 0 || this.holdings.awaitingStart
  }

  get running(): boolean {
    return this.started && !this.stopping
  }

  /** How claiming goes (see `Loop.claims`). */
  get claims(): ClaimStatus {
    return this.loop.claims
  }

  /**
   * Starts periodic processing and sweeps what earlier processes left. Without persistence (`cds.requires.queue:
   * false`) there is nothing to process: rows a persistent queue left in the table stay as they are.
   */
  async start(): Promise<void> {
    if (this.started || !cds.db || !this.settings.persistent) return
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
    this.markSqliteFile()
    const listen = this.store.listenStatement
    if (listen) {
      const controls = dialectFor(cds.db.kind).wakeUp?.controls.payload
      this.notifier = new Notifier(listen, payload => {
        if (payload === controls) this.controls.stale()
        this.wake()
      })
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
    brokerWaits.stop()
    const notifier = this.notifier
    this.notifier = undefined
    await notifier?.stop()
    const grace = new Promise<void>(resolve => setTimeout(resolve, this.settings.runner.shutdownGrace).unref())
    await Promise.race([Promise.allSettled([...this.inFlight]), grace])
    await this.holdings.handBackRunning(this.settings.runner.shutdownGrace)
    await this.storeInstance?.close()
    this.storeInstance = undefined
    this.loop.stop()
    if (this.sqliteFile) unmarkWriter(this.sqliteFile)
  }

  /** A SQLite file another app process serves too: both fail each other's requests (see sqlite-writers.ts). */
  private markSqliteFile(): void {
    const options = (cds.db as { options?: DatabaseConfig }).options
    const file = !this.tenants.multitenant && options ? sqliteFile(options, cds.root) : undefined
    if (!file || /:memory:$/.test(file)) return
    this.sqliteFile = file
    const other = markWriter(file)
    if (other) LOG.warn(`another app process (PID ${other.pid}) serves the SQLite database ${file} too: SQLite has one writer at a time, so requests of either may fail with "database is locked". Serve a SQLite file from one process, or use PostgreSQL for several instances (docs/DATABASES.md)`)
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

  /** Nothing is claimed, at enqueue neither: what is queued stays in the table (see `hold`). */
  get onHold(): boolean {
    return this.holds > 0
  }

  /**
   * Puts processing on hold until the returned release is called, so that a test reads the rows a request wrote before
   * any of them runs (lib/testing). What runs already finishes; a release wakes the runner.
   */
  hold(): () => void {
    this.holds++
    let released = false
    return () => {
      if (released) return
      released = true
      if (--this.holds === 0) this.wake()
    }
  }

  /** Resolves once nothing processable is left; keeps the process alive meanwhile. In memory, nothing is left after commit. */
  flush(): Promise<void> {
    return this.settings.persistent ? this.loop.flush() : Promise.resolve()
  }

  /** Runs claimed rows of one queue in a slot (`claimedBy` other than the owner: a reserved message, see reservations.ts). */
  run(queue: QueueSettings, rows: MessageRow[], claimedBy = this.owner, reserved = false): void {
    const done = runSlot(this, queue, rows, claimedBy, reserved).finally(() => this.inFlight.delete(done))
    this.inFlight.add(done)
  }
}
