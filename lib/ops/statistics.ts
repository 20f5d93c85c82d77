import type { QueueSnapshot } from '../interfaces'
import { LOG } from '../log'
import { clock } from '../time/clock'

/** The statistics of every queue of one tenant at one moment. */
export interface StatisticsSample {
  /** Epoch ms of the query. */
  at: number
  queues: QueueSnapshot[]
}

/** Counts the queues of `tenant` (undefined: the app has no tenants) at `now`, in one statement. */
export type StatisticsQuery = (tenant: string | undefined, now: number) => Promise<QueueSnapshot[]>

/**
 * The queue statistics the metrics' gauges and the health check read: at most one statistics query per tenant and
 * `interval`, however many gauges, metric readers and health probes read them meanwhile — a scrape never scans the
 * table. A query in progress is shared, and a failed one counts for its interval too, so an unreachable database
 * is not asked again on every scrape.
 */
export class QueueStatistics {
  private readonly latest = new Map<string, { at: number; sample: Promise<StatisticsSample> }>()
  private failing = false

  constructor(
    private readonly query: StatisticsQuery,
    private readonly interval: number,
    private readonly now: () => number = () => clock.now()
  ) {}

  /** The statistics of `tenant`, at most `interval` old. */
  current(tenant?: string): Promise<StatisticsSample> {
    const now = this.now()
    const cached = this.latest.get(tenant ?? '')
    if (cached && now - cached.at < this.interval) return cached.sample
    const sample = this.take(tenant, now)
    // every caller awaits it; this keeps a failure nobody reads again from being an unhandled rejection
    sample.catch(() => {})
    this.latest.set(tenant ?? '', { at: now, sample })
    return sample
  }

  private async take(tenant: string | undefined, at: number): Promise<StatisticsSample> {
    try {
      const queues = await this.query(tenant, at)
      if (this.failing) LOG.info('the queue statistics for metrics and health can be read again')
      this.failing = false
      return { at, queues }
    } catch (e) {
      if (!this.failing) LOG.warn(`could not read the queue statistics for metrics and health (tried again after ${this.interval} ms):`, e)
      this.failing = true
      throw e
    }
  }
}
