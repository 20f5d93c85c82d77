import cds from '@sap/cds'
import { isInboundMessage } from '../cap/messaging'
import { isDatabaseService } from '../cap/services'
import { assertSize, decode, encode, newMessage, type Additions, type Dispatchable, type Encoded } from '../codec'
import { queueSetting } from '../config/queue'
import { invalid, QueueError } from '../errors'
import type { QueueSettings } from '../interfaces'
import { orderingKeyOf } from '../ordering'
import type { EventQueues } from '../plugin'
import type { Runner } from '../runner/runner'
import { dispatchNow } from '../runner/dispatch'
import { claimAtEnqueue, type TransactionContext } from '../runner/reservations'
import { ensureDatabaseClock } from '../store/database-time'
import { sending } from '../telemetry/spans'
import { upsertTask } from './schedule'
import { LOG } from '../log'

const $queued = Symbol.for('cds-event-queues.queued')
const $unqueued = Symbol.for('cds-event-queues.unqueued')
const $wakes = Symbol('wakes the runner on commit')
const $marks = Symbol("marks the transaction's tenant as having messages")
const $inMemory = Symbol('queued in memory until commit')

interface ServiceExtras {
  [$queued]?: QueuedService
  [$unqueued]?: Service
  options?: Record<string, unknown>
}
type Service = cds.Service & ServiceExtras

/** A queued proxy: the service's API, with every call persisted instead of run. */
export type QueuedService = Service & { queued: object; outboxed: object; flush(): Promise<void> }

interface Context extends TransactionContext {
  [$wakes]?: boolean
  [$marks]?: boolean
  [$inMemory]?: string[]
  tenant?: string
}

const notQueueable = (name: string) => `'${name}' is a database service, which cannot be queued; queue the service that uses it.`

/**
 * A queue setting in a database's configuration (`cds.requires.db.outboxed: true`): CAP's `cds.connect.to` skips it
 * for database services, so it is reported, with the reason `cds.queued(db)` gives. A warning, not an error: an app
 * that ran on CAP's queue with it runs unchanged.
 */
export function warnIfQueuedDatabase(db: cds.Service): void {
  const conf = (db as Service).options ?? {}
  const key = ['outboxed', 'outbox', 'queued'].find(k => conf[k] !== undefined && conf[k] !== false)
  if (key && queueSetting(conf) !== false) LOG.warn(`cds.requires.${db.name}.${key} has no effect: ${notQueueable(db.name)}`)
}

/**
 * `cds.queued(srv, opts?)`: the queued proxy of a service; the same proxy on every call. Options for a service queued
 * already are validated all the same, and those that differ from its queue's are ignored with a warning (see
 * `QueueRegistry.confirm`).
 */
export function queued(plugin: EventQueues, srv: unknown, opts?: unknown): QueuedService {
  if (!(srv instanceof cds.Service)) throw invalid('argument of cds.queued(srv)', srv, 'a CAP service, e.g. await cds.connect.to(...)')
  if (isDatabaseService(srv)) throw new QueueError(`cds.queued(srv): ${notQueueable(srv.name)}`, 'INVALID_QUEUE_INPUT')
  if (opts !== undefined && (typeof opts !== 'object' || opts === null || Array.isArray(opts))) {
    throw invalid('options of cds.queued(srv, options)', opts, 'an object of queue options')
  }
  const service = srv as Service
  const original = service[$unqueued] ?? service
  const existing = original[$queued]
  if (existing) {
    if (opts) plugin.settings.queues.confirm(existing.queued as QueueSettings, original.name, opts as Record<string, unknown>)
    return existing
  }
  const queue = plugin.settings.queues.bind(original.name, original.options, opts as Record<string, unknown>)
  const proxy = Object.create(original) as QueuedService
  Object.defineProperty(proxy, $unqueued, { value: original })
  Object.defineProperty(original, $queued, { value: proxy })
  Object.defineProperties(proxy, {
    queued: { value: queue },
    outboxed: { value: queue },
    handle: { value: (req: Dispatchable) => enqueue(plugin, original, queue, req) },
    flush: { value: () => plugin.runner.flush() }
  })
  return proxy
}

/** `cds.unqueued(srv)`: the original service of a queued proxy; any other service as it is. */
export function unqueued<T>(srv: T): T {
  return ((srv as Service)?.[$unqueued] as T | undefined) ?? srv
}

async function enqueue(plugin: EventQueues, original: Service, queue: QueueSettings, req: Dispatchable): Promise<undefined> {
  const context = ((req as { context?: Context }).context ?? cds.context) as unknown as Context & Parameters<typeof encode>[1]
  if (!queue.persistent || !cds.db) return keepInMemory(context, storable(req, context, original, queue).msg, queue.name)
  // The handler's span continues the trace of this enqueue (see lib/telemetry).
  return sending(queue.name, context.tenant, traceContext => persist(plugin, queue, original, req, context, { traceContext }))
}

/** The request as its row stores it, refused at the call if it is too large. */
function storable(req: Dispatchable, context: Parameters<typeof encode>[1], original: Service, queue: QueueSettings, additions?: Additions): Encoded {
  const encoded = encode(req, context, original.name, queue.secretHeader, additions)
  assertSize(encoded.msg, queue.maxMessageSize, req.event)
  return encoded
}

/**
 * Writes the row in the caller's transaction: a task's upserted, a message claimed at enqueue where it can be. An
 * inbound message of an inboxed service that was received before is dropped instead (lib/receipts/inbox.ts).
 */
async function persist(plugin: EventQueues, queue: QueueSettings, original: Service, req: Dispatchable, context: Context & Parameters<typeof encode>[1], additions: Additions): Promise<undefined> {
  const { runner } = plugin
  const task = req.queue?.task
  const stored: Additions = { ...additions, idempotencyKey: plugin.settings.receivers.idempotencyKeys.get(original.name) }
  const inbound = isInboundMessage(req)
  // Encoded and keyed first: a call refused here has written nothing (no receipt).
  let encoded: Encoded
  let orderingKey: string | undefined
  try {
    encoded = storable(req, context, original, queue, stored)
    orderingKey = task ? undefined : orderingKeyOf(req, queue.orderingKey)
  } catch (e) {
    if (inbound && e instanceof QueueError) return keepRefused(plugin, queue, original, req, context, stored, e)
    throw e
  }
  // the row's times are the database's, also in a process that has not read its clock yet
  await ensureDatabaseClock(cds.db)
  const receipt = inbound ? plugin.inbox.receiptOf(original.name, req) : undefined
  if (receipt && !(await plugin.inbox.receive(runner.store, receipt, queue.name, context.tenant))) return undefined
  markTenant(runner, context)
  if (task) {
    await upsertTask(runner.store, queue, encoded, { ...req.queue, task }, plugin.settings.appid)
  } else {
    const after = typeof req.queue?.after === 'number' ? req.queue.after : 0
    // Not numbered here: the claim that first takes a keyed message numbers it, so that the caller's transaction
    // holds no lock of the plugin's that another transaction may wait for (lib/store/sequences.ts).
    if (receipt) encoded = storable(req, context, original, queue, { ...stored, receipt: receipt.ref })
    const message = { ...newMessage(queue.name, encoded, after), orderingKey }
    // Due now, in no key's order and in no tenant: this process may run it right after the commit. In a tenant the
    // commit's wake-up claims it: with claims at enqueue, a quiet tenant's messages waited 450–520 ms (p50) behind
    // another tenant's draining backlog instead of 9–28 ms (test/multitenancy/multitenancy.sqlite.test.js).
    if (!after && orderingKey === undefined && !context.tenant && (await claimAtEnqueue(runner, context, message, queue))) return undefined
    await runner.store.insert(message)
  }
  if (!context[$wakes]) {
    context[$wakes] = true
    context.on('succeeded', () => runner.wake(context.tenant))
  }
  return undefined
}

/**
 * An inbound message its queue refuses (too large, an invalid ordering key): a dead letter in the inbox instead of an
 * error, which a broker would answer with the same message again and again (lib/receipts/inbox.ts). Its receipt is
 * recorded first, so a redelivery is dropped rather than kept twice.
 */
async function keepRefused(plugin: EventQueues, queue: QueueSettings, original: Service, req: Dispatchable, context: Context & Parameters<typeof encode>[1], stored: Additions, refusal: QueueError): Promise<undefined> {
  const { runner, inbox } = plugin
  const receipt = inbox.receiptOf(original.name, req)
  if (receipt && !(await inbox.receive(runner.store, receipt, queue.name, context.tenant))) return undefined
  const encoded = encode(req, context, original.name, queue.secretHeader, { ...stored, receipt: receipt?.ref })
  await inbox.keepRefused(runner.store, original.name, newMessage(queue.name, encoded), refusal, queue, context.tenant)
  return undefined
}

/**
 * Other processes learn of a tenant's messages from its marker, so it is written before the transaction commits
 * (see lib/tenants/register.ts): once per transaction, in a multitenant app.
 */
function markTenant(runner: Runner, context: Context): void {
  const { tenant } = context
  if (context[$marks] || tenant === undefined || !runner.tenants.multitenant) return
  context[$marks] = true
  context.before('commit', () => runner.tenants.mark(tenant))
}

/** Without persistence (`cds.requires.queue: false`), queued calls run once after commit, as in CAP. */
function keepInMemory(context: Context, msg: string, target: string): undefined {
  let pending = context[$inMemory]
  if (!pending) {
    pending = context[$inMemory] = []
    const list = pending
    context.on('succeeded', async () => {
      for (const json of list.splice(0)) {
        try {
          await dispatchNow(decode(json, target))
        } catch (e) {
          LOG.error('queued call failed after commit (in-memory queue, not retried):', e)
        }
      }
    })
  }
  pending.push(msg)
  return undefined
}
