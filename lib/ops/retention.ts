import { setImmediate as yielded } from 'timers/promises'
import { groupBy } from '../group-by'
import type { QueueRegistry } from '../queues'
import type { DeletedMessage } from '../interfaces'
import type { QueueStore } from '../store/queue-store'
import { pruneExpired } from '../receipts/receipts'
import { countDeletedDeadLetters } from '../telemetry/metrics'
import { LOG } from '../log'
import { clock } from '../time/clock'

/**
 * Retention. Dead letters older than their queue's `deadLetterRetention` (counted from their last attempt) are
 * deleted in small batches, each its own short transaction that skips rows others hold, so the cleanup never holds a
 * long lock and several instances never wait for each other (each deletes rows the others skipped). Every deletion
 * is logged and counted in the metrics. Receipts past their expiry (`receiptRetention`, lib/receipts) go the same
 * way, in every tenant: one pruner for what the queue and its receivers keep.
 */

/** Dead letters one statement deletes at most. */
const BATCH = 500
/** The cleanup runs every tenth of the shortest retention (a dead letter goes at most 10% late), within these bounds. */
const MIN_INTERVAL = 1000
const MAX_INTERVAL = 3_600_000

/** Runs `fn` in a transaction of its own for `tenant` (undefined: the app has no tenants). */
export type InTenant = <T>(tenant: string | undefined, fn: () => Promise<T>) => Promise<T>

export class Retention {
  private timer: NodeJS.Timeout | undefined
  private running: Promise<void> | undefined
  /** The cleanup after the one in progress, shared by everyone who asks for one meanwhile (see `run`). */
  private next: Promise<void> | undefined
  private stopped = false

  constructor(
    private readonly queues: QueueRegistry,
    private readonly store: () => QueueStore,
    private readonly tenants: () => (string | undefined)[],
    private readonly inTenant: InTenant
  ) {}

  /** Runs the cleanup now and then on its schedule; the timer never keeps the process alive. */
  start(): void {
    if (this.stopped || this.timer) return
    this.plan(0)
  }

  /** No more cleanups; resolves once a cleanup in progress has finished its batch. */
  stop(): Promise<void> {
    this.stopped = true
    clearTimeout(this.timer)
    return this.next ?? this.running ?? Promise.resolve()
  }

  /**
   * Runs a cleanup that begins now, or right after the one in progress: that one may have passed rows written since
   * it began (a cleanup now also prunes receipts, so it runs longer). Callers meanwhile share the next one.
   */
  run(): Promise<void> {
    if (!this.running) return (this.running = this.cleanUp().finally(() => (this.running = undefined)))
    this.next ??= this.running.then(() => {
      this.next = undefined
      return this.run()
    })
    return this.next
  }

  /**
   * A tenth of the shortest retention of dead letters or receipts: queues created later with
   * `cds.queued(srv, { deadLetterRetention })` are found at the next run.
   */
  private interval(): number {
    const retentions = [...this.retentions(), ...this.queues.all().map(queue => queue.receiptRetention)]
    return Math.min(MAX_INTERVAL, Math.max(MIN_INTERVAL, Math.min(...retentions) / 10))
  }

  /** The retentions of the queues known so far; none while every queue keeps its dead letters. */
  private retentions(): number[] {
    const { byRetention, otherwise } = this.queues.retentions()
    return [...byRetention.keys(), otherwise].filter((r): r is number => r !== undefined)
  }

  private plan(delay: number): void {
    if (this.stopped) return
    this.timer = setTimeout(() => void this.run().finally(() => this.plan(this.interval())), delay).unref()
  }

  private async cleanUp(): Promise<void> {
    const deadLetters = this.retentions().length > 0
    for (const tenant of this.tenants()) {
      try {
        if (deadLetters) await this.cleanUpTenant(tenant)
      } catch (e) {
        LOG.warn(`could not delete the dead letters past their retention${tenant ? ` of tenant ${tenant}` : ''}; next time:`, e)
      }
      try {
        await this.pruneReceipts(tenant)
      } catch (e) {
        LOG.warn(`could not delete the receipts past their receiptRetention${tenant ? ` of tenant ${tenant}` : ''}; next time:`, e)
      }
    }
  }

  /** Receipts past their expiry, batch after batch until one finds fewer than a batch's worth, yielding between. */
  private async pruneReceipts(tenant: string | undefined): Promise<void> {
    const now = Date.now()
    let deleted = 0
    while (!this.stopped) {
      const batch = await this.inTenant(tenant, () => pruneExpired(now, BATCH))
      deleted += batch
      if (batch < BATCH) break
      await yielded()
    }
    if (deleted) LOG._debug && LOG.debug(`deleted ${deleted} receipts past their receiptRetention${tenant ? ` (tenant ${tenant})` : ''}`)
  }

  /**
   * Deletes batch after batch until a batch finds nothing (a batch smaller than the limit may only mean that another
   * instance holds some rows for a moment), yielding between batches.
   */
  private async cleanUpTenant(tenant: string | undefined): Promise<void> {
    const now = clock.now()
    const deleted = new Map<string, number>()
    try {
      while (!this.stopped) {
        const limits = this.queues.attemptLimits()
        const retentions = this.queues.retentions()
        const batch = await this.inTenant(tenant, () => this.store().deleteExpiredDeadLetters(limits, retentions, now, BATCH))
        record(batch, tenant, deleted)
        if (batch.length === 0) break
        // let the app's own writes have the table between two batches (SQLite has a single writer)
        await yielded()
      }
    } finally {
      if (deleted.size) logDeleted(deleted, tenant)
    }
  }
}

/** Counts a batch in the metrics and in `deleted` (by queue, service and event); its IDs go to the debug log. */
function record(batch: DeletedMessage[], tenant: string | undefined, deleted: Map<string, number>): void {
  for (const [queue, rows] of groupBy(batch, row => row.target)) countDeletedDeadLetters(queue, tenant, rows.length)
  for (const row of batch) {
    const what = `${row.target}: ${row.service ?? '?'}.${row.event ?? '?'}`
    deleted.set(what, (deleted.get(what) ?? 0) + 1)
  }
  if (batch.length) LOG._debug && LOG.debug(`deleted dead letters ${batch.map(row => row.ID).join(', ')}`)
}

/** One line per cleanup: how many, by queue, service and event. */
function logDeleted(deleted: Map<string, number>, tenant: string | undefined): void {
  const total = [...deleted.values()].reduce((sum, n) => sum + n, 0)
  const by = [...deleted].map(([what, n]) => `${what} ${n}`).join(', ')
  LOG.info(`deleted ${total} dead letters past their queue's deadLetterRetention${tenant ? ` (tenant ${tenant})` : ''}: ${by}`)
}
