import cds from '@sap/cds'
import { decode } from '../codec'
import type { QueueRegistry } from '../queues'
import type { QueueSettings, StoreChoice } from '../interfaces'
import { storeFor } from '../store/choose'
import type { QueueStore } from '../store/queue-store'
import { deadLettersCqn, DUE_SINCE, ENTITY, isDeadLetter, NOT_DUE, ownRowsCqn, PROCESSING, UNCLAIMED, WAITING_MARK, waitingSince } from '../store/rules'
import { clock } from '../time/clock'
import { pauseQueue, resumeQueue, withControls, type ControlFields } from '../controls/operator'
import { withDuplicates } from '../receipts/statistics'
import type { QueueControl } from '../controls/table'

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

/** What an operator's lists show of a message: what it is, where it goes, how often it failed and why. */
interface MessageSummary {
  ID: string
  target: string
  service: string | null
  event: string | null
  task: string | null
  attempts: number
  /** Enqueued (or first due, for a delayed message): what the relay lag is measured from. */
  timestamp: string
  lastError: string | null
}

/**
 * A dead letter as an operator lists it: what failed, where, and why. Its stored message is read on its own
 * (`OperatorQueries.message`): a list of thousands of messages of megabytes each would not fit the heap.
 */
export interface DeadLetterSummary extends MessageSummary {
  lastAttemptTimestamp: string | null
}

/** A message still waiting, as an operator looks for the cause of relay lag: is it failing, is anyone running it? */
export interface PendingSummary extends MessageSummary {
  status: string | null
  claimedBy: string | null
}

export interface QueueStatisticsRow extends ControlFields {
  queue: string
  service: string | null
  event: string | null
  pending: number
  processing: number
  dead: number
  oldestPendingSince: string | null
  /** Seconds the oldest due, undelivered message has been waiting. */
  relayLag: number
  /** Redeliveries an inboxed service dropped (on its row with `event` null), over the receipts kept. */
  duplicates: number
  /**
   * Since when (ISO) its events wait for their messaging service's broker, uncharged, as the earliest waiting mark of
   * the service's pending rows says (lib/runner/broker-waits.ts); null: they do not. Its `pending` are the events waiting.
   */
  brokerWaitingSince: string | null
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

  /**
   * IDs of the dead letters matching `filter`, read a chunk at a time by ID, without their messages (what bulk actions
   * work on): only rows written by others, whose service and event only their `msg` names, are read one at a time
   * where a filter on service or event needs them.
   */
  async deadLetterIDs(filter: DeadLetterFilter): Promise<string[]> {
    const IDs: string[] = []
    for (let after: string | undefined; ; ) {
      const query = this.selection(filter, [], true).orderBy('ID').limit(CHUNK)
      if (after !== undefined) query.and({ ID: { '>': after } })
      const rows = (await query) as DescribedRow[]
      for (const row of rows) if (!filtersMessages(filter) || (await this.matches(row, filter))) IDs.push(row.ID)
      if (rows.length < CHUNK) return IDs
      after = rows[rows.length - 1].ID
    }
  }

  /** The dead letters matching `filter`, oldest first, at most `limit` of them (all without one). */
  async listDeadLetters(filter: DeadLetterFilter, limit?: number): Promise<DeadLetterSummary[]> {
    const columns = ['task', 'attempts', 'timestamp', 'lastAttemptTimestamp', 'lastError']
    const rows = (await this.matching(filter, columns, true, limit)) as (DescribedRow & Omit<DeadLetterSummary, 'service' | 'event'>)[]
    return rows.map(row => ({ ...summary(row), lastAttemptTimestamp: row.lastAttemptTimestamp ?? null }))
  }

  /** The messages that are not dead letters and match `filter`, longest waiting first, at most `limit` of them. */
  async listPending(filter: DeadLetterFilter, limit?: number): Promise<PendingSummary[]> {
    const columns = ['task', 'attempts', 'timestamp', 'status', 'claimedBy', 'lastError']
    const rows = (await this.matching(filter, columns, false, limit)) as (DescribedRow & Omit<PendingSummary, 'service' | 'event'>)[]
    return rows.map(row => ({ ...summary(row), status: row.status ?? null, claimedBy: row.claimedBy ?? null }))
  }

  /** The stored message of this app's row `ID` (CAP's JSON: event, data, headers: what a replay sends), if there is one. */
  async message(ID: string): Promise<string | undefined> {
    const row = (await SELECT.one.from(MESSAGES).columns('msg').where({ ID }).and(this.own)) as { msg?: string | null } | undefined
    return row?.msg ?? undefined
  }

  /**
   * Dead letters (or with `dead: false` the other messages) of this app matching `filter`, oldest first, at most
   * `limit`: the limit applies in SQL, a page at a time where a filter on service or event must look into the
   * messages of rows written by others (see `matches`). Rows others wrote get their service and event from their
   * message, read one at a time.
   */
  private async matching(filter: DeadLetterFilter, columns: string[], dead: boolean, limit = Infinity): Promise<DescribedRow[]> {
    const found: DescribedRow[] = []
    for (let offset = 0; found.length < limit; ) {
      // without a filter on the message, every row read is one of the list: read no more than it still needs
      const size = filtersMessages(filter) ? CHUNK : Math.min(CHUNK, limit - found.length)
      const rows = (await this.selection(filter, columns, dead).orderBy('timestamp', 'ID').limit(size, offset)) as DescribedRow[]
      offset += rows.length
      for (const row of rows) if ((await this.matches(row, filter)) && found.push(row) === limit) break
      if (rows.length < size) break
    }
    return found
  }

  /**
   * The rows of this app matching `filter` as far as SQL can tell, without their messages: dead letters (or the
   * others), of the queue, enqueued before the time, and of the service and event where the columns name them — or
   * where they do not (rows others wrote; see `matches`).
   */
  private selection(filter: DeadLetterFilter, columns: string[], dead: boolean) {
    const query = SELECT.from(MESSAGES).columns('ID', 'target', 'service', 'event', ...columns).where(this.own).and(this.deadLetters(dead))
    if (filter.queue) query.and({ target: filter.queue })
    if (filter.enqueuedBefore !== undefined) query.and({ timestamp: { '<': new Date(filter.enqueuedBefore).toISOString() } })
    const named: unknown[] = []
    if (filter.service !== undefined) named.push({ ref: ['service'] }, '=', { val: filter.service })
    if (filter.event !== undefined) named.push(...(named.length ? ['and'] : []), { ref: ['event'] }, '=', { val: filter.event })
    if (named.length) query.and({ xpr: [{ xpr: named }, 'or', { ref: ['service'] }, 'is', 'null'] })
    return query
  }

  /**
   * Whether `row` matches the filter on service and event: by its columns, or for rows others wrote (empty columns)
   * by its message, read on its own; such a row gets its service and event from it on the way, for the lists.
   */
  private async matches(row: DescribedRow, filter: DeadLetterFilter): Promise<boolean> {
    if (!row.service) Object.assign(row, described({ ...row, msg: await this.message(row.ID) }))
    return matchesMessage({ service: row.service ?? undefined, event: row.event ?? undefined }, filter)
  }

  /**
   * Makes dead letters due now with a fresh retry budget. `lastError` stays, so the operator still sees why the
   * message failed until the next attempt overwrites it; `lastAttemptTimestamp` is the revive, which its lag counts
   * from (`DUE_SINCE`). Rows that stopped being dead letters meanwhile are skipped.
   */
  async revive(IDs: string[]): Promise<number> {
    const now = new Date(clock.now()).toISOString()
    let revived = 0
    for (const some of chunks(IDs)) {
      revived += await UPDATE(MESSAGES)
        .set({ attempts: 0, dueAt: now, lastAttemptTimestamp: now, ...UNCLAIMED.cqn })
        .where({ ID: { in: some } })
        .and(this.deadLetters())
    }
    return revived
  }

  /** Deletes dead letters; a dead letter that blocks its ordering key lets the key's next message run. */
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

  /** Pauses `queue` for every instance, recorded as done `by` an operator; its controls afterwards. */
  pause(queue: unknown, by: string): Promise<QueueControl> {
    return pauseQueue(this.queues, this.appid, queue, by)
  }

  /** Lifts a pause of `queue` and closes its circuit breaker, for every instance; its controls before and after. */
  resume(queue: unknown, by: string): Promise<{ before: QueueControl; after: QueueControl }> {
    return resumeQueue(this.queues, this.appid, queue, by)
  }

  /** The settings of `queue` where this process knows it (else it has no circuit breaker to show). */
  settingsOf(queue: string): QueueSettings | undefined {
    return this.queues.knows(queue) ? this.queues.forTarget(queue) : undefined
  }

  /** Per service: since when its pending events wait for their broker (the earliest of their waiting marks, ISO). */
  private async brokerWaits(): Promise<Map<string, string>> {
    const rows = (await SELECT.from(MESSAGES).columns('service', 'min(lastError) as mark').where(this.own)
      .and({ status: null, lastError: { like: `${WAITING_MARK}%` } }).groupBy('service')) as { service: string | null; mark: string | null }[]
    const since = rows.map(r => [r.service, waitingSince(r.mark)] as const)
    return new Map(since.filter((s): s is [string, string] => !!s[0] && !!s[1]))
  }

  private async count(where: object, alive: boolean): Promise<Map<string, Counted>> {
    const query = SELECT.from(MESSAGES)
      .columns('target', 'service', 'event', 'count(1) as count', `min(${DUE_SINCE}) as oldest`)
      .where(this.own)
      .and(this.deadLetters(!alive))
      .groupBy('target', 'service', 'event')
    if (Object.keys(where).length) query.and(where)
    const rows = (await query) as Counted[]
    return new Map(rows.map(r => [groupOf(r), r]))
  }

  /**
   * Per queue, service and event: waiting, being processed, dead, and how long the oldest due message has been
   * waiting (relay lag). Rows written by others count under their service once the runner has seen them. Each row
   * carries its queue's controls (pause, circuit breaker); a paused or broken queue without messages gets a row too.
   */
  async statistics(now = clock.now()): Promise<QueueStatisticsRow[]> {
    const pending = await this.count({ status: null }, true)
    const processing = await this.count({ status: PROCESSING }, true)
    const dead = await this.count({}, false)
    // Delayed messages carry their due time in `timestamp`: they are not late before it (`oldest`: see DUE_SINCE).
    const due = await this.count({ status: null, timestamp: { '<=': new Date(now).toISOString() } }, true)
    const waiting = await this.brokerWaits()
    const groups = new Map([...pending, ...processing, ...dead].map(([key, r]) => [key, r]))
    const counted = [...groups.keys()].sort().map(key => {
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
        relayLag: since ? Math.max(0, Math.floor((now - Date.parse(since)) / 1000)) : 0,
        brokerWaitingSince: (service && pending.has(key) && waiting.get(service)) || null
      }
    })
    const none = { pending: 0, processing: 0, dead: 0, oldestPendingSince: null, relayLag: 0, brokerWaitingSince: null }
    // the inboxes' dropped redeliveries beside the queues' counts (lib/receipts)
    const rows = await withDuplicates(counted, this.queues, this.appid, none)
    const blank = (queue: string) => ({ queue, service: null, event: null, ...none, duplicates: 0 })
    return withControls(rows, this.queues, this.appid, blank)
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

/**
 * How many messages one page of the operator service's lists holds when it shows their `msg`: as many of the largest
 * a queue allows (`maxMessageSize`) as fit `bytes` (`maxClaimBytes`, what the process holds of messages at once), at
 * least one. A list without `msg` (`$select`) is not paged beyond CAP's own limit.
 */
export function messagesPerPage(queues: QueueRegistry, bytes: number): number {
  const largest = Math.max(...queues.all().map(queue => queue.maxMessageSize))
  return Math.max(1, Math.floor(bytes / largest))
}

/** Whether a query of the operator service reads the messages themselves: it selects `msg`, or every column. */
export function readsMessages(query: unknown): boolean {
  const columns = (query as { SELECT?: { columns?: unknown[] } } | undefined)?.SELECT?.columns
  if (!columns) return true
  return columns.some(column => column === '*' || ['*', 'msg'].includes((column as { ref?: string[] }).ref?.[0] ?? ''))
}

/** Fills in service and event of rows read through the operator service where the columns are empty. */
export function describeRows(rows: unknown): void {
  for (const row of (Array.isArray(rows) ? rows : [rows]) as DescribedRow[]) {
    if (!row || typeof row !== 'object' || row.service || typeof row.msg !== 'string') continue
    Object.assign(row, described(row))
  }
}

/** Whether `filter` names a service or an event: rows others wrote name theirs only in their messages. */
function filtersMessages(filter: DeadLetterFilter): boolean {
  return filter.service !== undefined || filter.event !== undefined
}

function matchesMessage({ service, event }: { service?: string; event?: string }, filter: DeadLetterFilter): boolean {
  return (filter.service === undefined || filter.service === service) && (filter.event === undefined || filter.event === event)
}

function chunks<T>(items: T[]): T[][] {
  const result: T[][] = []
  for (let i = 0; i < items.length; i += CHUNK) result.push(items.slice(i, i + CHUNK))
  return result
}
