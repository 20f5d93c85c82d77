import { decode } from '../lib/codec'
import type { QueueRegistry } from '../lib/queues'
import { ENTITY, isDeadLetter, NOT_DUE, ownRowsCqn, UNCLAIMED } from '../lib/store/rules'

/**
 * The CQL the dead-letter service runs on `cds.outbox.Messages`. The queue's own hot path (claim, complete, fail)
 * is raw SQL in lib/store; these are operator queries, where readability matters more than statement count.
 */

const MESSAGES = ENTITY
/** Bulk statements name their rows by ID; chunks keep the statements below the databases' parameter limits. */
const CHUNK = 500

type Xpr = unknown[]
type Condition = { xpr: Xpr }

/** Which dead letters a bulk action applies to; every given filter must match. */
export interface DeadLetterFilter {
  queue?: string
  service?: string
  event?: string
  /** Only messages enqueued before this time (epoch ms). */
  enqueuedBefore?: number
}

/** What the operator sees about a single row before acting on it. */
export interface MessageState {
  ID: string
  target: string
  attempts: number
  dead: boolean
}

export interface QueueStatistics {
  queue: string
  pending: number
  processing: number
  dead: number
  oldestPendingSince: string | null
  /** Seconds the oldest due, undelivered message has been waiting. */
  relayLag: number
}

const ref = (name: string) => ({ ref: [name] })
const val = (value: unknown) => ({ val: value })

/** The operator's queries on this app's rows, with the queues' settings (each row's `maxAttempts`). */
export class OperatorQueries {
  /** The rows of this app: CAP's `appid` lets several apps share one table (the same rule as the store's). */
  private readonly own: Condition

  constructor(
    private readonly queues: QueueRegistry,
    appid: string | undefined
  ) {
    this.own = ownRowsCqn(appid)
  }

  /** The condition that restricts a query on `cds.outbox.Messages` to this app's rows. */
  ownRows(): Condition {
    return this.own
  }

  /**
   * Dead letters among rows without a due time: `maxAttempts` differs per queue and lives in configuration, so the
   * condition is built from the queues that actually have such rows, grouped by their limit.
   */
  async deadLetterCondition(): Promise<Condition> {
    const rows = (await SELECT.distinct.from(MESSAGES).columns('target').where(NOT_DUE.cqn).and(this.own)) as { target: string | null }[]
    const byLimit = new Map<number, string[]>()
    for (const { target } of rows) {
      if (target == null) continue
      const limit = this.queues.forTarget(target).maxAttempts
      byLimit.set(limit, [...(byLimit.get(limit) ?? []), target])
    }
    if (byLimit.size === 0) return { xpr: [val(1), '=', val(0)] }
    const terms: Xpr = []
    for (const [limit, targets] of byLimit) {
      if (terms.length) terms.push('or')
      terms.push({ xpr: [ref('target'), 'in', { list: targets.map(val) }, 'and', ref('attempts'), '>=', val(limit)] })
    }
    return { xpr: terms }
  }

  /** The row as the actions need it, or undefined if there is no such message. */
  async messageState(ID: string): Promise<MessageState | undefined> {
    const row = (await SELECT.one.from(MESSAGES).columns('ID', 'target', 'attempts', 'dueAt').where({ ID }).and(this.own)) as
      | { ID: string; target: string; attempts: number | null; dueAt: unknown }
      | undefined
    if (!row) return undefined
    const attempts = Number(row.attempts ?? 0)
    return { ID: row.ID, target: row.target, attempts, dead: row.dueAt == null && isDeadLetter(attempts, this.queues.forTarget(row.target)) }
  }

  /** IDs of the dead letters matching `filter`; service and event live inside `msg`, so they are matched here. */
  async deadLetterIDs(filter: DeadLetterFilter): Promise<string[]> {
    const query = SELECT.from(MESSAGES).columns('ID', 'target', 'msg').where(NOT_DUE.cqn).and(this.own).and(await this.deadLetterCondition())
    if (filter.queue) query.and({ target: filter.queue })
    if (filter.enqueuedBefore !== undefined) query.and({ timestamp: { '<': new Date(filter.enqueuedBefore).toISOString() } })
    const rows = (await query) as { ID: string; target: string; msg: string }[]
    const wanted = filter.service !== undefined || filter.event !== undefined
    return rows.filter(row => !wanted || matchesMessage(row, filter)).map(row => row.ID)
  }

  /**
   * Makes dead letters due now with a fresh retry budget. `lastError` stays, so the operator still sees why the
   * message failed until the next attempt overwrites it. Rows that stopped being dead letters meanwhile are skipped.
   */
  async revive(IDs: string[]): Promise<number> {
    let revived = 0
    for (const some of chunks(IDs)) {
      revived += await UPDATE(MESSAGES)
        .set({ attempts: 0, dueAt: new Date().toISOString(), ...UNCLAIMED.cqn })
        .where({ ID: { in: some }, ...NOT_DUE.cqn })
    }
    return revived
  }

  async remove(IDs: string[]): Promise<number> {
    let removed = 0
    for (const some of chunks(IDs)) removed += await DELETE.from(MESSAGES).where({ ID: { in: some }, ...NOT_DUE.cqn })
    return removed
  }

  private async countByQueue(where: object, ...more: (object | Condition)[]): Promise<Map<string, number>> {
    const query = SELECT.from(MESSAGES).columns('target', 'count(1) as count').where(where).and(this.own).groupBy('target')
    for (const condition of more) query.and(condition)
    const rows = (await query) as Counted[]
    return new Map(rows.map(r => [r.target, Number(r.count)]))
  }

  /** Per queue: waiting, being processed, dead, and how long the oldest due message has been waiting (relay lag). */
  async statistics(now = Date.now()): Promise<QueueStatistics[]> {
    const pending = await this.countByQueue({ dueAt: { '!=': null }, status: null })
    const processing = await this.countByQueue({ status: 'processing' })
    const dead = await this.countByQueue(NOT_DUE.cqn, await this.deadLetterCondition())
    // Delayed messages carry their due time in `timestamp`: they are not late before it.
    const oldest = (await SELECT.from(MESSAGES)
      .columns('target', 'min(timestamp) as oldest')
      .where({ dueAt: { '!=': null }, timestamp: { '<=': new Date(now).toISOString() } })
      .and(this.own)
      .groupBy('target')) as { target: string; oldest: string }[]
    const oldestByQueue = new Map(oldest.map(r => [r.target, r.oldest]))
    const queues = new Set([...pending.keys(), ...processing.keys(), ...dead.keys()])
    return [...queues].sort().map(queue => {
      const since = oldestByQueue.get(queue) ?? null
      return {
        queue,
        pending: pending.get(queue) ?? 0,
        processing: processing.get(queue) ?? 0,
        dead: dead.get(queue) ?? 0,
        oldestPendingSince: since,
        relayLag: since ? Math.max(0, Math.floor((now - Date.parse(since)) / 1000)) : 0
      }
    })
  }
}

type Counted = { target: string; count: number | string }

function matchesMessage(row: { target: string; msg: string }, filter: DeadLetterFilter): boolean {
  let serviceName: string
  let event: string | undefined
  try {
    const message = decode(row.msg, row.target)
    serviceName = message.serviceName
    event = message.request.event
  } catch {
    return false // a corrupt message has no service or event to match
  }
  return (filter.service === undefined || filter.service === serviceName) && (filter.event === undefined || filter.event === event)
}

function chunks<T>(items: T[]): T[][] {
  const result: T[][] = []
  for (let i = 0; i < items.length; i += CHUNK) result.push(items.slice(i, i + CHUNK))
  return result
}
