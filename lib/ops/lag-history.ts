import { LOG } from '../log'
import { clock } from '../time/clock'

/**
 * The relay lag of the last hour, sampled in memory by the process serving the ops page.
 *
 * Sampled, not computed from the table: a message that was delivered is deleted, so the table only tells how late
 * the messages still waiting are, not how late the ones delivered ten minutes ago were. Kept per process: every
 * instance samples the same shared table, so any instance's history is the app's; a restarted instance starts an
 * empty one (the page says since when it has samples).
 */

/** How far back the history goes: what the page's chart shows. */
export const HISTORY_WINDOW = 60 * 60 * 1000

/** One queue at one moment, as `statistics()` counted it. */
export interface LagSample {
  /** When the sample was taken (ISO). */
  at: string
  queue: string
  pending: number
  processing: number
  dead: number
  /** Seconds the queue's oldest due message had been waiting (the largest over its services and events). */
  relayLag: number
}

/** What a sample is taken from: statistics rows, one per queue, service and event. */
export interface QueueCounts {
  queue: string
  pending: number
  processing: number
  dead: number
  relayLag: number
}

export class LagHistory {
  private readonly samples: LagSample[] = []
  private timer: NodeJS.Timeout | undefined
  private running: Promise<void> | undefined
  /** The moment the sample in progress is stamped with. */
  private runningAt = 0
  private stopped = false

  constructor(
    /** Counts the queues as of `at` (epoch ms), the moment the sample is stamped with. */
    private readonly count: (at: number) => Promise<QueueCounts[]>,
    private readonly interval: number,
    private readonly now: () => number = () => clock.now()
  ) {}

  /** Samples now and then every `interval` ms; the timer never keeps the process alive. */
  start(): void {
    if (this.timer || this.stopped) return
    void this.sample()
    this.timer = setInterval(() => void this.sample(), this.interval)
    this.timer.unref()
  }

  /**
   * No more samples; resolves once a sample in progress is done. Called before the database disconnects: a sample
   * started after that would open a new pool on a database service that is going away.
   */
  stop(): Promise<void> {
    this.stopped = true
    clearInterval(this.timer)
    this.timer = undefined
    return this.running ?? Promise.resolve()
  }

  /**
   * The samples of the last hour, oldest first, with a fresh one at the end so the newest point is never stale: one
   * counted at or after this call (a sample begun before it, by the timer say, is awaited, then another one taken).
   */
  async history(): Promise<LagSample[]> {
    const asked = this.now()
    if (this.running && this.runningAt < asked) await this.running
    await this.sample()
    return this.samples.slice()
  }

  /** Takes one sample; concurrent callers share a sample in progress. A failing database only costs a point. */
  sample(): Promise<void> {
    if (this.stopped) return Promise.resolve()
    this.running ??= this.take().finally(() => (this.running = undefined))
    return this.running
  }

  private async take(): Promise<void> {
    // one moment for the lag and the sample's time, so a point's lag is its age at its time
    const at = (this.runningAt = this.now())
    let counts: QueueCounts[]
    try {
      counts = await this.count(at)
    } catch (e) {
      LOG.warn('the ops page could not sample the queue statistics:', e)
      return
    }
    // A queue that emptied still gets its point (0), so its line drops to zero instead of stopping at its last lag.
    const seen = new Set(this.samples.map(s => s.queue))
    this.samples.push(...perQueue(counts, new Date(at).toISOString(), seen))
    const oldest = new Date(at - HISTORY_WINDOW).toISOString()
    const expired = this.samples.findIndex(s => s.at >= oldest)
    this.samples.splice(0, expired === -1 ? this.samples.length : expired)
  }
}

/**
 * The lag histories of a multitenant app: one per tenant, each counted in that tenant's database, so an operator sees
 * the queues and figures of their own tenant only (one shared history would show every tenant the samples another
 * tenant's operator caused). Sampled when asked: each `history(tenant)` adds a sample of that tenant, so the chart has
 * points while the page is open; a timer per tenant would query every tenant's database for good once an operator had
 * looked. A tenant not asked about for the history's window is forgotten, with its samples.
 */
export class TenantLagHistories {
  private readonly byTenant = new Map<string | undefined, { history: LagHistory; askedAt: number }>()
  private stopped = false

  constructor(
    /** Counts the queues of `tenant` as of `at` (epoch ms). */
    private readonly count: (tenant: string | undefined, at: number) => Promise<QueueCounts[]>,
    private readonly interval: number,
    private readonly now: () => number = () => clock.now()
  ) {}

  /** The samples of the last hour of `tenant`, with a fresh one at the end. */
  history(tenant: string | undefined): Promise<LagSample[]> {
    if (this.stopped) return Promise.resolve([])
    const now = this.now()
    for (const [known, { askedAt }] of this.byTenant) if (now - askedAt > HISTORY_WINDOW) this.byTenant.delete(known)
    const entry = this.byTenant.get(tenant) ?? { history: new LagHistory(at => this.count(tenant, at), this.interval, this.now), askedAt: now }
    entry.askedAt = now
    this.byTenant.set(tenant, entry)
    return entry.history.history()
  }

  /** No more samples; resolves once those in progress are done (see `LagHistory.stop`). */
  async stop(): Promise<void> {
    this.stopped = true
    await Promise.all([...this.byTenant.values()].map(({ history }) => history.stop()))
  }
}

/** Statistics are per queue, service and event; the chart shows queues: counts add up, the lag is the largest. */
function perQueue(counts: QueueCounts[], at: string, seen: Set<string>): LagSample[] {
  const queues = new Map<string, LagSample>()
  for (const queue of seen) queues.set(queue, { at, queue, pending: 0, processing: 0, dead: 0, relayLag: 0 })
  for (const c of counts) {
    const q = queues.get(c.queue) ?? { at, queue: c.queue, pending: 0, processing: 0, dead: 0, relayLag: 0 }
    q.pending += c.pending
    q.processing += c.processing
    q.dead += c.dead
    q.relayLag = Math.max(q.relayLag, c.relayLag)
    queues.set(c.queue, q)
  }
  return [...queues.values()]
}
