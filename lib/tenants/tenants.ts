import cds from '@sap/cds'
import { runDetached } from '../cap/contexts'
import { onSubscriptions, subscribedTenants } from '../cap/mtxs'
import { QueueError } from '../errors'
import { LOG } from '../log'
import type { TenantRegister } from './register'
import { clock } from '../time/clock'

/** A tenant's messages live in its own database; `undefined` is the app's one database (single tenant). */
export type Tenant = string | undefined

/** How often the list of subscribed tenants is read again (subscriptions in an MTX sidecar are not heard of). */
const SUBSCRIPTIONS_REFRESH = 60_000
/** Upper bound for the pause after failed claims in one tenant (its database unreachable or gone). */
const MAX_TENANT_BACKOFF = 30_000

/**
 * Which tenants a pass of the runner looks into. Single tenant: always the one database. Multitenant: the tenants
 * that want a look — a transaction there enqueued and committed in this process, a slot of it finished, its next
 * message is due, its marker says another process committed messages there (see TenantRegister), or everything
 * at start and on flush — least recently served first, so a tenant with a backlog never keeps another one waiting.
 */
export class Tenants {
  private readonly subscribed = new Set<string>()
  /** Tenants waiting for a look. */
  private readonly wanted = new Set<Tenant>()
  /** When a claim last found messages of each tenant: the order of a round. */
  private readonly served = new Map<Tenant, number>()
  private readonly nextDue = new Map<Tenant, number>()
  private readonly failures = new Map<Tenant, { count: number; retryAt: number }>()
  /**
   * Tenants unsubscribed in this process, with when their unsubscribe ended (undefined while it runs): nothing of the
   * runner reads or writes their databases any more, until they are subscribed again (see `readSubscriptions`).
   */
  private readonly unsubscribed = new Map<string, number | undefined>()
  private markersReadAt = 0
  private subscriptionsReadAt = 0

  constructor(
    /** The register of tenants with messages; undefined: a single tenant app. */
    private readonly register: TenantRegister | undefined,
    private readonly pollInterval: number,
    /** Abandons what the runner holds of a tenant being unsubscribed, without a write (see `Runner.abandonTenant`). */
    private readonly abandon: (tenant: string) => void = () => {}
  ) {
    if (register) {
      onSubscriptions({
        subscribed: tenant => {
          this.unsubscribed.delete(tenant)
          this.subscribed.add(tenant)
          this.want(tenant)
        },
        unsubscribing: tenant => this.unsubscribing(tenant),
        unsubscribed: tenant => {
          if (this.unsubscribed.has(tenant)) this.unsubscribed.set(tenant, Date.now())
        }
      })
    }
  }

  get multitenant(): boolean {
    return !!this.register
  }

  /** The tenants whose queues this process looks after (retention, gauges, health): the one database, or the subscribed tenants. */
  get all(): Tenant[] {
    return this.multitenant ? [...this.subscribed] : [undefined]
  }

  /**
   * Runs `fn` in `tenant`'s database, as the privileged runner, detached from whatever request is current; rejects
   * without touching the database of a tenant unsubscribed in this process.
   */
  run<T>(tenant: Tenant, fn: () => Promise<T>): Promise<T> {
    if (this.gone(tenant)) return Promise.reject(new QueueError(`${describe(tenant)} was unsubscribed: its database is not opened again`, 'TENANT_UNSUBSCRIBED'))
    return runInTenant(tenant, fn)
  }

  /** Whether `tenant` was unsubscribed in this process (and not subscribed again since). */
  gone(tenant: Tenant): boolean {
    return tenant !== undefined && this.unsubscribed.has(tenant)
  }

  /**
   * Whether a message the broker delivered in `tenant` may be handled, which opens the tenant's database: always in a
   * single tenant app; in a multitenant app only for a subscribed tenant, never for one unsubscribed in this process.
   * A tenant not known here, or any with `fresh` (an earlier delivery failed: it may have been unsubscribed in an MTX
   * sidecar), is looked up in MTX's list of tenants first.
   */
  async accepts(tenant: Tenant, fresh = false): Promise<boolean> {
    if (!this.multitenant || tenant === undefined) return true
    if (this.gone(tenant)) return false
    if (this.subscribed.has(tenant) && !fresh) return true
    await this.readSubscriptions()
    return this.subscribed.has(tenant)
  }

  /**
   * `tenant` gets a look in the next pass (a transaction there committed messages, or a slot of it finished). In a
   * multitenant app that may be the provider's database (no tenant) too, after a commit there: as with CAP's queue,
   * its messages run after their commit, not after a crash (MTX deploys no queue table there, so it has no marker).
   */
  want(tenant: Tenant): void {
    if (this.gone(tenant)) return
    if (tenant !== undefined) this.subscribed.add(tenant)
    this.wanted.add(tenant)
  }

  /** Every tenant gets a look in the next pass (start, flush). */
  async wantAll(): Promise<void> {
    if (!this.multitenant) return this.want(undefined)
    await this.readSubscriptions()
    for (const tenant of this.subscribed) this.wanted.add(tenant)
  }

  /** Marks `tenant` as having messages, for other processes (call before its transaction commits). */
  async mark(tenant: Tenant): Promise<void> {
    if (tenant !== undefined && !this.gone(tenant)) await this.register?.mark(tenant)
  }

  /**
   * Before a pass: tenants whose next message is due, and (once per poll interval) those with a marker, want a
   * look; the subscriptions are read again now and then.
   */
  async refresh(now: number): Promise<void> {
    for (const [tenant, due] of this.nextDue) if (due <= now) this.want(tenant)
    if (!this.register || now - this.markersReadAt < this.pollInterval) return
    this.markersReadAt = now
    if (now - this.subscriptionsReadAt >= SUBSCRIPTIONS_REFRESH) await this.readSubscriptions()
    // a marker of a tenant unsubscribed elsewhere may outlive its database: only subscribed tenants are looked into
    for (const tenant of await this.register.marked()) if (this.subscribed.has(tenant)) this.wanted.add(tenant)
  }

  /**
   * The tenants of this pass, least recently served first; those whose claims fail wait for their backoff. In a
   * multitenant app a poll looks into the tenants with markers or due messages only (see `refresh`).
   */
  round(now: number): Tenant[] {
    // the one database is looked into by every pass: polls find what others wrote there
    if (!this.multitenant) return [undefined]
    const ready = [...this.wanted].filter(t => (this.failures.get(t)?.retryAt ?? 0) <= now)
    return ready.sort((a, b) => (this.served.get(a) ?? 0) - (this.served.get(b) ?? 0))
  }

  /** A claim in `tenant` found `count` messages; none: it needs no look until something wants one again. */
  claimed(tenant: Tenant, count: number): void {
    const failed = this.failures.get(tenant)
    if (failed && this.failures.delete(tenant)) LOG.info(`database reachable again after ${failed.count} failed claims (${describe(tenant)})`)
    if (count > 0) this.served.set(tenant, clock.now())
    else this.wanted.delete(tenant)
  }

  /** A claim in `tenant` failed: it is tried again after a backoff, the other tenants go on. */
  claimFailed(tenant: Tenant, error: unknown): void {
    const count = (this.failures.get(tenant)?.count ?? 0) + 1
    const delay = Math.min(MAX_TENANT_BACKOFF, 100 * 2 ** count)
    this.failures.set(tenant, { count, retryAt: clock.now() + delay })
    const log = count === 1 ? LOG.error : LOG.warn
    log(`claiming messages in ${describe(tenant)} failed (${count}x), retrying in ${delay} ms:`, error)
  }

  get failing(): boolean {
    return this.failures.size > 0
  }

  /** Whether the last claim in `tenant` failed. */
  failedIn(tenant: Tenant): boolean {
    return this.failures.has(tenant)
  }

  /** Claims that failed in a row since the last one that succeeded, in the tenant where most did (0: none fails). */
  get failedClaims(): number {
    return Math.max(0, ...[...this.failures.values()].map(f => f.count))
  }

  /**
   * After a pass that found nothing more to claim in `tenant` (looked into since `lookedAt`): when its next message
   * is due, or, with nothing pending, its marker goes.
   */
  async settled(tenant: Tenant, next: number | undefined, lookedAt: number): Promise<void> {
    if (next !== undefined) return void this.nextDue.set(tenant, next)
    this.nextDue.delete(tenant)
    if (tenant !== undefined) await this.register?.clear(tenant, lookedAt)
  }

  /** When the next pass is needed: the earliest due message or end of a backoff among the tenants seen. */
  earliest(): number | undefined {
    const times = [...this.nextDue.values(), ...[...this.failures.values()].map(f => f.retryAt)]
    return times.length ? Math.min(...times) : undefined
  }

  private async readSubscriptions(): Promise<void> {
    const readAt = Date.now()
    const tenants = await subscribedTenants()
    this.subscriptionsReadAt = clock.now()
    for (const tenant of [...this.subscribed]) if (!tenants.includes(tenant)) this.drop(tenant)
    for (const tenant of tenants) {
      // listed while its unsubscribe ran here, or after: still gone; listed by a read begun after it ended: subscribed again (elsewhere)
      const ended = this.unsubscribed.get(tenant)
      if (this.unsubscribed.has(tenant) && (ended === undefined || ended >= readAt)) continue
      this.unsubscribed.delete(tenant)
      this.subscribed.add(tenant)
    }
  }

  /** An unsubscribed tenant: never looked into again; its database is gone or about to be. */
  private drop(tenant: string): void {
    this.subscribed.delete(tenant)
    this.wanted.delete(tenant)
    this.nextDue.delete(tenant)
    this.failures.delete(tenant)
    this.served.delete(tenant)
    this.register?.forget(tenant).catch(e => LOG.warn(`could not remove the marker of unsubscribed tenant ${tenant}:`, e))
  }

  /**
   * A tenant being unsubscribed in this process: besides being dropped, it is gone (no statement of the runner opens
   * its database again), and what the runner holds of it is abandoned without a write.
   */
  private unsubscribing(tenant: string): void {
    this.unsubscribed.set(tenant, undefined)
    this.drop(tenant)
    this.abandon(tenant)
  }
}

/** Runs `fn` in `tenant`'s database as the privileged runner, detached from whatever request is current. */
export function runInTenant<T>(tenant: Tenant, fn: () => Promise<T>): Promise<T> {
  if (tenant === undefined) {
    cds.context = undefined
    return fn()
  }
  return runDetached({ tenant, user: new cds.User.Privileged() }, fn)
}

export function describe(tenant: Tenant): string {
  return tenant === undefined ? 'the database' : `tenant ${tenant}`
}
