import type { HealthOptions, HealthStatus, QueueHealth } from '../../index'
import { metaTenant } from '../cap/mtxs'
import { invalid, QueueError } from '../errors'
import type { InTenant } from './retention'
import { brokerWaits } from '../runner/broker-waits'
import type { Runner } from '../runner/runner'
import type { Settings } from '../settings'
import type { QueueStatistics } from './statistics'
import { missingTable, missingTableLine } from '../store/missing-tables'
import { iso } from '../store/rows'
import { errorType } from '../telemetry/names'
import { parseDuration } from '../time/durations'
import { LOG } from '../log'
import { clock } from '../time/clock'

/**
 * The queue's readiness in this process, for an app's health endpoint (`cds.queued.health()`): the runner started,
 * the database answers, claims succeed, and — if asked — no queue lags behind more than `maxLag`. The answer names
 * errors by their code only: health endpoints are usually public.
 */

const DEFAULT_TIMEOUT = 2000
const WHERE = 'cds.queued.health(options)'

type Checks = QueueHealth['checks']

function parsed(options: unknown): { maxLag: number | undefined; timeout: number } {
  if (options === undefined) return { maxLag: undefined, timeout: DEFAULT_TIMEOUT }
  if (typeof options !== 'object' || options === null || Array.isArray(options)) throw invalid(`options of ${WHERE}`, options, "an object like { maxLag: '5m' }")
  const { maxLag, timeout, ...unknown } = options as HealthOptions & Record<string, unknown>
  const key = Object.keys(unknown)[0]
  if (key !== undefined) throw invalid(`option of ${WHERE}`, key, "'maxLag' or 'timeout'")
  const ms = timeout === undefined ? DEFAULT_TIMEOUT : parseDuration(timeout, `timeout of ${WHERE}`)
  if (ms < 1) throw invalid(`timeout of ${WHERE}`, timeout, 'a duration of at least 1 ms')
  return { maxLag: maxLag === undefined ? undefined : parseDuration(maxLag, `maxLag of ${WHERE}`), timeout: ms }
}

/** `promise`, or a TIMEOUT error after `ms`: a probe must answer in time even if the database does not. */
async function within<T>(ms: number, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new QueueError(`no answer within ${ms} ms`, 'TIMEOUT')), ms)
  })
  promise.catch(() => {}) // answered late or failed after the timeout: nobody waits for it any more
  try {
    return await Promise.race([promise, timeout])
  } finally {
    clearTimeout(timer)
  }
}

const status = (up: boolean): HealthStatus => (up ? 'UP' : 'DOWN')

/**
 * A failed check's error by its code; a missing table of the queue (the app served before `cds deploy`) also says
 * which and what to do, as the log does: no secret in that, and the one thing an operator needs.
 */
function failure(error: unknown, tenant: string | undefined): { error: string; reason?: string } {
  const table = missingTable(error)
  return table === undefined ? { error: errorType(error) } : { error: 'TABLE_MISSING', reason: missingTableLine(table, tenant) }
}

export class Health {
  private last: HealthStatus = 'UP'

  constructor(
    private readonly settings: Settings,
    private readonly runner: Runner,
    private readonly statistics: QueueStatistics,
    /** The tenants whose lag counts (see Tenants.all). */
    private readonly tenants: () => (string | undefined)[],
    private readonly inTenant: InTenant
  ) {}

  async check(options?: unknown): Promise<QueueHealth> {
    const { maxLag, timeout } = parsed(options)
    // Without persistence (`cds.requires.queue: false`) queued calls run in memory: nothing to check.
    if (!this.settings.persistent) return { status: 'UP', checks: {} }
    const errors: unknown[] = []
    const [database, lag] = await Promise.all([
      this.database(timeout, errors),
      maxLag === undefined ? undefined : this.lag(maxLag, timeout, errors)
    ])
    const checks: Checks = { runner: { status: status(this.runner.running) }, database, claims: this.claims() }
    if (lag) checks.lag = lag
    const waiting = brokerWaits.current
    if (waiting.length) checks.broker = { status: 'UP', waiting: waiting.map(w => ({ service: w.service, since: iso(w.since), events: w.events ?? null, suspected: w.suspected })) }
    const overall = status(Object.values(checks).every(c => c?.status === 'UP'))
    this.logChange(overall, checks, errors)
    return { status: overall, checks }
  }

  private async database(timeout: number, errors: unknown[]): Promise<NonNullable<Checks['database']>> {
    const started = Date.now()
    try {
      // in a multitenant app, MTX's own tenant: the register of tenants with messages lives in its queue table
      await within(timeout, this.inTenant(metaTenant(), () => this.runner.store.ping()))
      return { status: 'UP', latency: Date.now() - started }
    } catch (e) {
      errors.push(e)
      return { status: 'DOWN', ...failure(e, metaTenant()) }
    }
  }

  private claims(): NonNullable<Checks['claims']> {
    const { lastSucceededAt, failures } = this.runner.claims
    return { status: status(failures === 0), lastSucceededAt: lastSucceededAt === undefined ? null : iso(lastSucceededAt), failures }
  }

  /**
   * The largest relay lag of any queue, from the shared statistics (at most `statisticsInterval` old). A queue an
   * operator paused lags on purpose: it is named in `paused`, not checked.
   */
  private async lag(maxLag: number, timeout: number, errors: unknown[]): Promise<NonNullable<Checks['lag']>> {
    const limit = maxLag / 1000
    try {
      const samples = await within(timeout, Promise.all(this.tenants().map(tenant => this.statistics.current(tenant))))
      const all = samples.flatMap(s => s.queues)
      const queues = all.filter(q => !q.paused)
      const paused = [...new Set(all.filter(q => q.paused).map(q => q.queue))].sort()
      const worst = queues.reduce((a, b) => (b.relayLag > (a?.relayLag ?? -1) ? b : a), queues[0])
      const sample = { at: samples.length ? Math.min(...samples.map(s => s.at)) : clock.now() }
      const relayLag = worst?.relayLag ?? 0
      return { status: status(relayLag <= limit), relayLag, maxLag: limit, queue: worst?.queue ?? null, sampledAt: iso(sample.at), paused }
    } catch (e) {
      errors.push(e)
      return { status: 'DOWN', relayLag: null, maxLag: limit, queue: null, sampledAt: null, paused: [], error: errorType(e) }
    }
  }

  /** One log line when the status changes, with the errors behind it; probes come every few seconds. */
  private logChange(overall: HealthStatus, checks: Checks, errors: unknown[]): void {
    if (overall === this.last) return
    this.last = overall
    if (overall === 'UP') return LOG.info('the event queue is healthy again')
    const down = Object.entries(checks).filter(([, c]) => c?.status === 'DOWN').map(([name]) => name)
    LOG.warn(`the event queue is not healthy: ${down.join(', ')} DOWN`, ...errors)
  }
}
