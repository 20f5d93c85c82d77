import cds from '@sap/cds'
import { createHash } from 'crypto'
import { insertIntoMetaTenant } from '../cap/mtxs'
import { ENTITY } from '../store/rules'
import { clock } from '../time/clock'

/** The `target` of a marker row: no queue has this name, so no runner ever dispatches one. */
const MARKER = 'cds-event-queues/tenant'

/**
 * Which tenants may have committed messages: a marker row per tenant in MTX's own tenant (t0), whose database has
 * CAP's `cds.outbox.Messages` (CAP keeps its queue's markers there too). An enqueue marks its tenant before its
 * transaction commits; a runner that finds a tenant with nothing left removes the marker. Every instance reads the
 * markers once per poll, one small query, so a tenant whose process crashed after committing is found at the next
 * poll without any instance looking into every tenant's database.
 *
 * A marker is written at most once per `refresh` per tenant and process, and removed only when it is older than
 * twice that at the start of a look that found the tenant empty: an enqueue that relied on a recent marker has
 * committed by then (it checks in its transaction's 'commit' phase), or the look saw its messages.
 */
export class TenantRegister {
  /** When this process last wrote each tenant's marker. */
  private readonly written = new Map<string, number>()
  /** Tenants whose marker the last read found or this process wrote since: only theirs can need removing. */
  private present = new Set<string>()

  constructor(
    private readonly t0: string,
    private readonly appid: string | undefined,
    private readonly refresh: number
  ) {}

  /** Makes sure `tenant`'s marker exists (call before the transaction that enqueued commits). */
  async mark(tenant: string): Promise<void> {
    const now = clock.now()
    const last = this.written.get(tenant)
    if (last !== undefined && now - last < this.refresh) return
    const ID = this.markerID(tenant)
    const timestamp = new Date(now).toISOString()
    await this.inT0(async () => {
      if (await UPDATE(ENTITY).set({ timestamp }).where({ ID })) return
      await insertIntoMetaTenant({ ID, timestamp, target: MARKER, msg: JSON.stringify({ tenant }), appid: this.appid ?? null })
    })
    this.written.set(tenant, now)
    this.present.add(tenant)
  }

  /** The tenants with a marker. */
  async marked(): Promise<string[]> {
    const rows = (await this.inT0(() => SELECT.from(ENTITY).columns('msg').where({ target: MARKER, appid: this.appid ?? null }))) as { msg: string }[]
    const tenants = rows.map(r => (JSON.parse(r.msg) as { tenant: string }).tenant)
    this.present = new Set(tenants)
    return tenants
  }

  /** Removes `tenant`'s marker, found empty by a look that started at `lookedAt`, unless an enqueue may rely on it. */
  async clear(tenant: string, lookedAt: number): Promise<void> {
    // a tenant found empty after every look: no statement in t0 unless its marker may be there (the next read says)
    if (!this.present.delete(tenant)) return
    const before = new Date(lookedAt - 2 * this.refresh).toISOString()
    await this.inT0(() => DELETE.from(ENTITY).where({ ID: this.markerID(tenant), timestamp: { '<': before } }))
  }

  /** Removes `tenant`'s marker whatever its age (the tenant is unsubscribed). */
  async forget(tenant: string): Promise<void> {
    this.written.delete(tenant)
    await this.inT0(() => DELETE.from(ENTITY).where({ ID: this.markerID(tenant) }))
  }

  /** A UUID of the tenant and app: one marker per tenant, whichever instance writes it. */
  private markerID(tenant: string): string {
    const hex = createHash('sha256').update(`${this.appid ?? ''}\u0000${tenant}`).digest('hex')
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`
  }

  private inT0<T>(fn: () => T): Promise<Awaited<T>> {
    return cds.tx({ tenant: this.t0, user: new cds.User.Privileged() }, fn) as unknown as Promise<Awaited<T>>
  }
}
