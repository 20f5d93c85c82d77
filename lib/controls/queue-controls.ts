import type { Tenant } from '../tenants/tenants'
import { readControls, type QueueControl } from './table'
import { LOG } from '../log'

/** What the runner's copy of the control rows needs: a transaction of its own in a tenant's database, and whom to tell. */
export interface ControlsHost {
  inTenant<T>(tenant: Tenant, fn: () => Promise<T>): Promise<T>
  /** `queue` of `tenant` was paused (by an operator here or elsewhere): what has not started goes back. */
  paused(tenant: Tenant, queue: string): void
}

interface Known {
  readAt: number
  controls: Map<string, QueueControl>
}

const describe = (c: QueueControl) => `by ${c.pausedBy ?? 'an operator'} at ${new Date(c.pausedAt ?? 0).toISOString()}`

/**
 * This process's copy of the control rows of each tenant's queues (db/controls.cds): which queues an operator paused
 * and what their circuit breakers say. Read once per poll interval in each tenant the runner looks into, at once after
 * a change announced by another process (PostgreSQL's notification) and changed in place by what this process does
 * itself. A queue without a row costs nothing here: it is simply not in the map.
 */
export class QueueControls {
  private readonly byTenant = new Map<Tenant, Known>()
  private failing = false

  constructor(
    private readonly appid: string | undefined,
    private readonly pollInterval: number,
    private readonly host: ControlsHost
  ) {}

  /** Reads the control rows of `tenant` again if the copy is older than the poll interval (or announced stale). */
  async refresh(tenant: Tenant, now = Date.now()): Promise<void> {
    const known = this.byTenant.get(tenant)
    if (known && now - known.readAt < this.pollInterval) return
    let rows: QueueControl[]
    try {
      rows = await this.host.inTenant(tenant, () => readControls(this.appid))
    } catch (e) {
      // Not deployed yet (an upgrade without a deployment), or the database is away: what is known stays, for an interval.
      if (!this.failing) LOG.warn('could not read the queue controls (pauses, circuit breakers); tried again every poll interval:', e)
      this.failing = true
      this.byTenant.set(tenant, { readAt: now, controls: known?.controls ?? new Map() })
      return
    }
    if (this.failing) LOG.info('the queue controls can be read again')
    this.failing = false
    const controls = new Map(rows.map(c => [c.queue, c]))
    this.byTenant.set(tenant, { readAt: now, controls })
    this.compare(tenant, known?.controls, controls)
  }

  /** Another process changed a control: every tenant's copy is read again at the next pass. */
  stale(): void {
    for (const known of this.byTenant.values()) known.readAt = 0
  }

  /** What this process changed itself: in the copy at once (the caller logs it). */
  apply(tenant: Tenant, control: QueueControl): void {
    const known = this.byTenant.get(tenant) ?? { readAt: 0, controls: new Map() }
    const before = known.controls.get(control.queue)
    known.controls.set(control.queue, control)
    this.byTenant.set(tenant, known)
    if (control.pausedAt !== undefined && before?.pausedAt === undefined) this.host.paused(tenant, control.queue)
  }

  control(tenant: Tenant, queue: string): QueueControl | undefined {
    return this.byTenant.get(tenant)?.controls.get(queue)
  }

  isPaused(tenant: Tenant, queue: string): boolean {
    return this.control(tenant, queue)?.pausedAt !== undefined
  }

  /** The paused queues of `tenant`. */
  paused(tenant: Tenant): string[] {
    const known = this.byTenant.get(tenant)
    return known ? [...known.controls.values()].filter(c => c.pausedAt !== undefined).map(c => c.queue) : []
  }

  /** Logs the pauses and resumptions others made, as this process learns of them. */
  private compare(tenant: Tenant, before: Map<string, QueueControl> | undefined, after: Map<string, QueueControl>): void {
    for (const control of after.values()) {
      if (control.pausedAt === undefined || before?.get(control.queue)?.pausedAt !== undefined) continue
      LOG.info(`queue ${control.queue} is paused (${describe(control)}): its messages stay in the table until it is resumed`)
      this.host.paused(tenant, control.queue)
    }
    for (const control of before?.values() ?? []) {
      if (control.pausedAt === undefined || after.get(control.queue)?.pausedAt !== undefined) continue
      LOG.info(`queue ${control.queue} was resumed: its messages run again`)
    }
  }
}
