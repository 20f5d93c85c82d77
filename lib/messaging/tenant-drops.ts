import { countDropped } from '../telemetry/metrics'
import type { LinkLog } from './redis-link'

/**
 * Entries of a tenant that is not subscribed (unsubscribed, or unknown to MTX): acknowledged without being handled,
 * since handling one would open, and on SQLite create, that tenant's database, and retrying it would block every
 * other tenant's entries behind it. Each is counted (`cds_event_queues.inbound.dropped`); a warning per tenant says how
 * many, at most once per `WARN_EVERY`, so a stream full of them does not flood the log.
 */

const WARN_EVERY = 60_000

export class TenantDrops {
  private readonly unreported = new Map<string, { count: number; warnedAt: number }>()

  constructor(
    private readonly service: string,
    private readonly log: LinkLog
  ) {}

  dropped(stream: string, tenant: string | undefined): void {
    countDropped(this.service, tenant)
    const key = tenant ?? ''
    const state = this.unreported.get(key) ?? { count: 0, warnedAt: 0 }
    state.count++
    this.unreported.set(key, state)
    const now = Date.now()
    if (now - state.warnedAt < WARN_EVERY) return
    this.log.warn(`${this.service}: dropped ${state.count} ${state.count === 1 ? 'entry' : 'entries'} of tenant ${tenant} (${stream}): the tenant is not subscribed`)
    state.count = 0
    state.warnedAt = now
  }
}
