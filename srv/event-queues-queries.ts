import cds from '@sap/cds'
import { decode } from '../lib/codec'
import type { QueueRegistry } from '../lib/queues'
import type { StoreChoice } from '../lib/interfaces'
import { storeFor } from '../lib/store/choose'
import type { QueueStore } from '../lib/store/queue-store'
import { deadLettersCqn, ENTITY, isDeadLetter, NOT_DUE, ownRowsCqn, PROCESSING, UNCLAIMED } from '../lib/store/rules'

/**
 * The CQL the dead-letter service runs on `cds.outbox.Messages`. The queue's own hot path (claim, complete, fail)
 * is raw SQL in lib/store; these are operator queries, where readability matters more than statement count.
 */

const MESSAGES = ENTITY
/** Bulk statements name their rows by ID; chunks keep the statements below the databases' parameter limits. */
export const CHUNK = 500

type Condition = { xpr: unknown[] }

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

/** Why an operator's action on a message is refused: there is no such message (404). */
export const noSuchMessage = (ID: string): string => `There is no queued message with ID ${ID}.`

/** Why an operator's action on a message is refused: it is no dead letter (409). */
export const notDeadLetter = ({ ID, attempts }: MessageState): string =>
  `Message ${ID} is not a dead letter: it has ${attempts} attempt${attempts === 1 ? '' : 's'} and is still retried or processed.`

/** A dead letter as an operator lists it: what failed, where, and why. */
export interface DeadLetterSummary {
  ID: string
  target: string
  service: string | null
  event: string | null
  task: string | null
  attempts: number
  timestamp: string
  lastAttemptTimestamp: string | null
  lastError: string | null
  /** The stored message (CAP's JSON: event, data, headers), as the operator service shows it: what a replay sends. */
  msg: string | null
}

/** A message still waiting, as an operator looks for the cause of relay lag: is it failing, is anyone running it? */
export interface PendingSummary {
  ID: string
  target: string
  service: string | null
  event: string | null
  task: string | null
  attempts: number
  /** Enqueued (or first due, for a delayed message): what the relay lag is measured from. */
  timestamp: string
  status: string | null
  claimedBy: string | null
  lastError: string | null
}

export interface QueueStatistics {
  queue: string
  service: string | null
  event: string | null
  pending: number
  processing: number
  dead: number
  oldestPendingSince: string | null
  /** Seconds the oldest due, undelivered message has been waiting. */
  relayLag: number
}

/** What the dead letter and pending lists show alike of a row: its service and event, also from `msg` (see `described`). */
function summary(row: DescribedRow & { task?: string | null; attempts?: unknown; timestamp: string; lastError?: string | null }) {
  const { service, event } = described(row)
  return {
    ID: row.ID,
    target: row.target,
    service: service ?? null,
    event: event ?? null,
    task: row.task ?? null,
    attempts: Number(row.attempts ?? 0),
    timestamp: row.timestamp,
    lastError: row.lastError ?? null
  }
}

/** The operator's queries on this app's rows, with the queues' settings (each row's `maxAttempts`). */
export class OperatorQueries {
  /** The rows of this app: CAP's `appid` lets several apps share one table (the same rule as the store's). */
  private readonly own: Condition

  constructor(
    private readonly queues: QueueRegistry,
    private readonly appid: string | undefined,
    /** `cds.requires.queue.store`: the operator's statements run on the store the runner uses. */
    private readonly storeChoice: StoreChoice
  ) {
    this.own = ownRowsCqn(appid)
  }

  private storeInstance: QueueStore | undefined

  /** The queue's statements, for what deleting a message of an ordering key entails (see `remove`). */
  private get store(): QueueStore {
    return (this.storeInstance ??= storeFor(this.storeChoice, cds.db, this.appid))
  }

  /** The condition that restricts a query on `cds.outbox.Messages` to this app's rows. */
  ownRows(): Condition {
    return this.own
  }

  /**
   * Dead letters by CAP's columns — `attempts` at or above the `maxAttempts` of each row's queue — the set CAP's
   * recipe shows too; `dead: false` selects the others.
   */
  deadLetters(dead = true): Condition {
    return deadLettersCqn(this.queues.attemptLimits(), dead)
  }

  /** The row as the actions need it, or undefined if there is no such message. */
  async messageState(ID: string): Promise<MessageState | undefined> {
    const row = (await SELECT.one.from(MESSAGES).columns('ID', 'target', 'attempts').where({ ID }).and(this.own)) as
      | { ID: string; target: string; attempts: number | null }
      | undefined
    if (!row) return undefined
    const attempts = Number(row.attempts ?? 0)
    return { ID: row.ID, target: row.target, attempts, dead: isDeadLetter(attempts, this.queues.forTarget(row.target)) }
  }

  /** The queues an operator can name: those the configuration defines, and the targets of this app's rows. */
  async queueNames(): Promise<string[]> {
    const rows = (await SELECT.distinct.from(MESSAGES).columns('target').where(this.own)) as { target: string }[]
    return [...new Set([...this.queues.all().map(queue => queue.name), ...rows.map(row => row.target)])].sort()
  }

  /** IDs of the dead letters matching `filter`; rows written by others keep service and event only inside `msg`. */
  async deadLetterIDs(filter: DeadLetterFilter): Promise<string[]> {
    return (await this.matching(filter, [])).map(row => row.ID)
  }

  /** The dead letters matching `filter`, oldest first, at most `limit` of them (all without one). */
  async listDeadLetters(filter: DeadLetterFilter, limit?: number): Promise<DeadLetterSummary[]> {
    const columns = ['task', 'attempts', 'timestamp', 'lastAttemptTimestamp', 'lastError']
    const rows = (await this.matching(filter, columns)) as (DescribedRow & Omit<DeadLetterSummary, 'service' | 'event' | 'msg'>)[]
    return rows.slice(0, limit).map(row => ({
      ...summary(row),
      lastAttemptTimestamp: row.lastAttemptTimestamp ?? null,
      msg: row.msg ?? null
    }))
  }

  /** The messages that are not dead letters and match `filter`, longest waiting first, at most `limit` of them. */
  async listPending(filter: DeadLetterFilter, limit?: number): Promise<PendingSummary[]> {
    const columns = ['task', 'attempts', 'timestamp', 'status', 'claimedBy', 'lastError']
    const rows = (await this.matching(filter, columns, false)) as (DescribedRow & Omit<PendingSummary, 'service' | 'event'>)[]
    return rows.slice(0, limit).map(row => ({ ...summary(row), status: row.status ?? null, claimedBy: row.claimedBy ?? null }))
  }

  /** Dead letters (or with `dead: false` the other messages) of this app matching `filter`, oldest first. */
  private async matching(filter: DeadLetterFilter, columns: string[], dead = true): Promise<DescribedRow[]> {
    const query = SELECT.from(MESSAGES)
      .columns('ID', 'target', 'service', 'event', 'msg', ...columns)
      .where(this.own)
      .and(this.deadLetters(dead))
      .orderBy('timestamp', 'ID')
    if (filter.queue) query.and({ target: filter.queue })
    if (filter.enqueuedBefore !== undefined) query.and({ timestamp: { '<': new Date(filter.enqueuedBefore).toISOString() } })
    const rows = (await query) as DescribedRow[]
    const wanted = filter.service !== undefined || filter.event !== undefined
    return rows.filter(row => !wanted || matchesMessage(described(row), filter))
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
        .where({ ID: { in: some } })
        .and(this.deadLetters())
    }
    return revived
  }

  /** Deletes dead letters; a dead letter that held back its ordering key lets the key's next message run. */
  async remove(IDs: string[]): Promise<number> {
    let removed = 0
    for (const some of chunks(IDs)) {
      // Written before they are read (dead letters are not due anyway): on SQLite a transaction that reads first
      // cannot wait for another process's writer and fails SQLITE_BUSY (the CLI beside a running app); on
      // PostgreSQL it locks the rows as a SELECT … FOR UPDATE would.
      await UPDATE(MESSAGES).set(NOT_DUE.cqn).where({ ID: { in: some } }).and(this.deadLetters())
      const keyed = (await SELECT.from(MESSAGES).columns('orderingKey').where({ ID: { in: some } }).and(this.deadLetters())) as { orderingKey: string | null }[]
      removed += await DELETE.from(MESSAGES).where({ ID: { in: some } }).and(this.deadLetters())
      await this.store.promoteNext(keyed.map(r => r.orderingKey))
    }
    return removed
  }

  private async count(where: object, alive: boolean): Promise<Map<string, Counted>> {
    const query = SELECT.from(MESSAGES)
      .columns('target', 'service', 'event', 'count(1) as count', 'min(timestamp) as oldest')
      .where(this.own)
      .and(this.deadLetters(!alive))
      .groupBy('target', 'service', 'event')
    if (Object.keys(where).length) query.and(where)
    const rows = (await query) as Counted[]
    return new Map(rows.map(r => [groupOf(r), r]))
  }

  /**
   * Per queue, service and event: waiting, being processed, dead, and how long the oldest due message has been
   * waiting (relay lag). Rows written by others count under their service once the runner has seen them.
   */
  async statistics(now = Date.now()): Promise<QueueStatistics[]> {
    const pending = await this.count({ status: null }, true)
    const processing = await this.count({ status: PROCESSING }, true)
    const dead = await this.count({}, false)
    // Delayed messages carry their due time in `timestamp`: they are not late before it.
    const due = await this.count({ status: null, timestamp: { '<=': new Date(now).toISOString() } }, true)
    const groups = new Map([...pending, ...processing, ...dead].map(([key, r]) => [key, r]))
    return [...groups.keys()].sort().map(key => {
      const { target, service, event } = groups.get(key)!
      const since = due.get(key)?.oldest ?? null
      return {
        queue: target,
        service: service ?? null,
        event: event ?? null,
        pending: Number(pending.get(key)?.count ?? 0),
        processing: Number(processing.get(key)?.count ?? 0),
        dead: Number(dead.get(key)?.count ?? 0),
        oldestPendingSince: since,
        relayLag: since ? Math.max(0, Math.floor((now - Date.parse(since)) / 1000)) : 0
      }
    })
  }
}

type DescribedRow = { ID: string; target: string; service?: string | null; event?: string | null; msg?: string }
type Counted = { target: string; service: string | null; event: string | null; count: number | string; oldest: string | null }

const groupOf = (r: Counted) => JSON.stringify([r.target, r.service, r.event])

/** Service and event of a row: its columns, or for rows written by others (CAP's runner) what its `msg` says. */
function described(row: DescribedRow): { service?: string; event?: string } {
  if (row.service) return { service: row.service, event: row.event ?? undefined }
  try {
    const message = decode(row.msg ?? '', row.target)
    return { service: message.serviceName, event: message.request.event }
  } catch {
    return {} // a corrupt message has no service or event
  }
}

/** Fills in service and event of rows read through the operator service where the columns are empty. */
export function describeRows(rows: unknown): void {
  for (const row of (Array.isArray(rows) ? rows : [rows]) as DescribedRow[]) {
    if (!row || typeof row !== 'object' || row.service || typeof row.msg !== 'string') continue
    Object.assign(row, described(row))
  }
}

function matchesMessage({ service, event }: { service?: string; event?: string }, filter: DeadLetterFilter): boolean {
  return (filter.service === undefined || filter.service === service) && (filter.event === undefined || filter.event === event)
}

function chunks<T>(items: T[]): T[][] {
  const result: T[][] = []
  for (let i = 0; i < items.length; i += CHUNK) result.push(items.slice(i, i + CHUNK))
  return result
}
