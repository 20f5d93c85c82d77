import cds from '@sap/cds'
import { decode, eventOf } from '../codec'
import { eventQueues } from '../plugin'
import { millis } from '../store/rows'
import { ENTITY, isDeadLetter, ownRowsCqn, PROCESSING } from '../store/rules'

/**
 * What a test reads of the queue: the messages in `cds.outbox.Messages` as the app's database has them, `msg`
 * decoded, and the messages a request or a transaction queued — read while the runner is on hold, so that none of
 * them has run (and gone) before the test looks.
 */

/** A message in the queue table, as a test asserts it. */
export interface QueuedMessage {
  ID: string
  /** The queue it is on (the row's `target`): `queue` unless its service has a queue of its own. */
  queue: string
  /** The service it is for. */
  service: string
  /** Its event; for a queued query, the query's kind (`INSERT` …). */
  event: string | undefined
  data: unknown
  headers: Record<string, unknown> | undefined
  /** The CQN of a queued query (`srv.run(query)`). */
  query: unknown
  /** Its ordering key: messages with the same key run one at a time, in order. */
  key: string | undefined
  /** The task name of a scheduled task (`srv.schedule`). */
  task: string | undefined
  /** When it is due: at once, after a delay, or its next attempt after a failed one; null while it runs or once dead. */
  dueAt: Date | null
  status: 'pending' | 'processing' | 'dead'
  attempts: number
  lastError: string | undefined
  /** The user it runs as, and its tenant, as stored. */
  user: string | undefined
  tenant: string | undefined
}

/** Which messages `messages()` returns: every one given must match. */
export interface MessageFilter {
  queue?: string
  service?: string
  event?: string
}

/** In a multitenant app: the tenant whose database is read (default: that of `cds.context`). */
export interface TenantOption {
  tenant?: string
}

interface Row {
  ID: string
  target: string
  msg: string
  timestamp: string
  dueAt: string | null
  attempts: number | null
  status: string | null
  lastError: string | null
  task: string | null
  orderingKey: string | null
}

const COLUMNS = ['ID', 'target', 'msg', 'timestamp', 'dueAt', 'attempts', 'status', 'lastError', 'task', 'orderingKey']

function statusOf(row: Row): QueuedMessage['status'] {
  const attempts = Number(row.attempts ?? 0)
  if (isDeadLetter(attempts, eventQueues().settings.queues.forTarget(row.target))) return 'dead'
  return row.status === PROCESSING ? 'processing' : 'pending'
}

/** A row, its `msg` decoded; a row whose `msg` does not decode shows what its columns say. */
function queuedMessage(row: Row): QueuedMessage {
  const status = statusOf(row)
  // a pending row's due time: the plugin's index, or CAP's timestamp for a delayed row CAP's queue wrote
  const dueAt = status === 'pending' ? new Date(Math.max(millis(row.timestamp), millis(row.dueAt) || 0)) : null
  const columns = { ID: row.ID, queue: row.target, key: row.orderingKey ?? undefined, task: row.task ?? undefined, dueAt, status, attempts: Number(row.attempts ?? 0), lastError: row.lastError ?? undefined }
  try {
    const { serviceName, request, userId, context } = decode(row.msg, row.target)
    // the query as stored (CQN), not as the cds.ql object the runner dispatches: plain data for assertions
    const query = request.query === undefined ? undefined : JSON.parse(JSON.stringify(request.query))
    return { ...columns, service: serviceName, event: eventOf(request), data: request.data, headers: request.headers, query, user: userId, tenant: context.tenant }
  } catch {
    return { ...columns, service: row.target, event: undefined, data: undefined, headers: undefined, query: undefined, user: undefined, tenant: undefined }
  }
}

/** The messages of this app in the queue table in the order they are due (enqueue order for those due at once), read in the current transaction. */
async function read(): Promise<QueuedMessage[]> {
  const own = ownRowsCqn(eventQueues().settings.appid)
  const rows = (await SELECT.from(ENTITY).columns(...COLUMNS).where(own).orderBy('timestamp', 'ID')) as Row[]
  return rows.map(queuedMessage)
}

/** A transaction of its own in `tenant`'s database (default: the current one), as a privileged user. */
function inTenant<T>(tenant: string | undefined, fn: () => Promise<T>): Promise<T> {
  const Privileged = cds.User.Privileged as unknown as new () => cds.User
  return cds.tx({ tenant: tenant ?? cds.context?.tenant, user: new Privileged() }, fn) as unknown as Promise<T>
}

function matching(list: QueuedMessage[], filter: MessageFilter): QueuedMessage[] {
  return list.filter(m => (filter.queue ?? m.queue) === m.queue && (filter.service ?? m.service) === m.service && (filter.event ?? m.event) === m.event)
}

/** The messages in the queue table now (committed), in the order they are due (enqueue order for those due at once). */
export function messages(filter: MessageFilter & TenantOption = {}): Promise<QueuedMessage[]> {
  return inTenant(filter.tenant, read).then(list => matching(list, filter))
}

/** The IDs of the messages there now, to tell the new ones apart. */
export async function present(tenant: string | undefined): Promise<Set<string>> {
  return new Set((await inTenant(tenant, read)).map(m => m.ID))
}

/** The messages not among `before`, read in the current transaction: what it queued, before it commits. */
export async function queuedSince(before: Set<string>): Promise<QueuedMessage[]> {
  return (await read()).filter(m => !before.has(m.ID))
}

/** The messages not among `before` that are committed in `tenant`'s database. */
export function committedSince(before: Set<string>, tenant: string | undefined): Promise<QueuedMessage[]> {
  return inTenant(tenant, () => queuedSince(before))
}

/**
 * Holds the runner back while `fn` runs: what `fn` queues stays in the table until the test has read it. Nothing new
 * is claimed meanwhile (at enqueue neither); what runs already finishes; `cds.flush()` processes nothing while held.
 */
export async function whileOnHold<T>(fn: () => Promise<T>): Promise<T> {
  const release = eventQueues().runner.hold()
  try {
    return await fn()
  } finally {
    release()
  }
}

/**
 * The messages `fn` queued and committed — a request (`POST(...)` of `cds.test`), a service call, a transaction — in
 * the order they are due, read from the table before any of them ran. They run once this resolves (`cds.flush()`
 * waits for them). If `fn` fails, so does this.
 */
export function queuedBy(fn: () => unknown, options: TenantOption = {}): Promise<QueuedMessage[]> {
  return whileOnHold(async () => {
    const before = await present(options.tenant)
    await fn()
    return committedSince(before, options.tenant)
  })
}
