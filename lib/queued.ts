import cds from '@sap/cds'
import { bindingFor, registerQueue, type QueueBinding } from './config'
import { assertSize, decode, encode, newMessage, type Dispatchable } from './codec'
import type { NewMessage } from './interfaces'
import { dispatchNow } from './dispatch'
import { invalid, QueueError } from './errors'
import { orderingKeyOf } from './ordering'
import { runner } from './runner'
import { taskMessage } from './schedule'

const LOG = cds.log('queue')

const $queued = Symbol.for('cds-event-queues.queued')
const $unqueued = Symbol.for('cds-event-queues.unqueued')
const $wakes = Symbol('wakes the runner on commit')
const $inMemory = Symbol('queued in memory until commit')

interface ServiceExtras {
  [$queued]?: QueuedService
  [$unqueued]?: Service
  isDatabaseService?: boolean
  options?: Record<string, unknown>
}
type Service = cds.Service & ServiceExtras

/** A queued proxy: the service's API, with every call persisted instead of run. */
export type QueuedService = Service & { queued: object; outboxed: object; flush(): Promise<void> }

interface Context {
  [$wakes]?: boolean
  [$inMemory]?: string[]
  tenant?: string
  on(event: 'succeeded' | 'failed', listener: () => unknown): void
}

function isService(srv: unknown): srv is Service {
  return srv instanceof cds.Service
}

/** `cds.queued(srv, opts?)`: the queued proxy of a service; the same proxy on every call. */
export function queued(srv: unknown, opts?: unknown): QueuedService {
  if (!isService(srv)) throw invalid('argument of cds.queued(srv)', srv, 'a CAP service, e.g. await cds.connect.to(...)')
  if (srv.isDatabaseService || srv instanceof cds.DatabaseService) {
    throw new QueueError(`cds.queued(srv): '${srv.name}' is a database service, which cannot be queued; queue the service that uses it.`, 'INVALID_QUEUE_INPUT')
  }
  if (opts !== undefined && (typeof opts !== 'object' || opts === null || Array.isArray(opts))) {
    throw invalid('options of cds.queued(srv, options)', opts, 'an object of queue options')
  }
  const original = srv[$unqueued] ?? srv
  const existing = original[$queued]
  if (existing) return existing
  const binding = bindingFor(original.name, original.options, opts as Record<string, unknown>)
  registerQueue(binding)
  const proxy = Object.create(original) as QueuedService
  Object.defineProperty(proxy, $unqueued, { value: original })
  Object.defineProperty(original, $queued, { value: proxy })
  Object.defineProperties(proxy, {
    queued: { value: binding.options },
    outboxed: { value: binding.options },
    handle: { value: (req: Dispatchable) => enqueue(original, binding, req) },
    flush: { value: () => runner.flush() }
  })
  return proxy
}

/** `cds.unqueued(srv)`: the original service of a queued proxy; any other service as it is. */
export function unqueued<T>(srv: T): T {
  return ((srv as Service)?.[$unqueued] as T | undefined) ?? srv
}

async function enqueue(original: Service, binding: QueueBinding, req: Dispatchable): Promise<undefined> {
  const context = ((req as { context?: Context }).context ?? cds.context) as unknown as Context & Parameters<typeof encode>[1]
  const msg = encode(req, context, original.name)
  assertSize(msg, binding.options.maxMessageSize, req.event)
  if (!binding.persistent || !cds.db) return keepInMemory(context, msg, binding.target)
  const appid = (cds.env.appid as string) ?? null
  const task = req.queue?.task
  if (task) {
    await runner.store.upsertTask(taskMessage(original.name, binding, msg, { ...req.queue, task }), appid)
  } else {
    const after = typeof req.queue?.after === 'number' ? req.queue.after : 0
    const orderingKey = orderingKeyOf(req, binding.options.orderingKey)
    const message = { ...newMessage(binding.target, msg, after), orderingKey }
    // Due now, in no key's order and for the runner's own tenant: this process may run it right after the commit.
    if (!after && orderingKey === undefined && !context.tenant && (await runAfterCommit(context, message, appid))) return undefined
    await runner.store.insert(message, appid)
  }
  if (!context[$wakes]) {
    context[$wakes] = true
    context.on('succeeded', () => runner.wake())
  }
  return undefined
}

/**
 * Writes a message already claimed for a slot this process reserved and runs it once the transaction commits: no
 * claim round trip between commit and handler. False, writing nothing, when the runner has no slot free.
 */
async function runAfterCommit(context: Context, message: NewMessage, appid: string | null): Promise<boolean> {
  const reservation = runner.reserve(message.target)
  if (!reservation) return false
  const { claimedBy, claimedAt, leaseUntil } = reservation
  try {
    await runner.store.insertClaimed(message, appid, { ID: message.ID, claimedBy, claimedAt }, leaseUntil)
  } catch (e) {
    runner.unreserve()
    throw e
  }
  let settled = false
  const settle = (then: () => void) => () => {
    if (settled) return
    settled = true
    then()
  }
  const { ID, target, msg } = message
  const row = { ID, target, msg, timestamp: message.dueAt.getTime(), attempts: 0, lastError: null, task: null, appid, claimedAt }
  // 'failed' also follows 'succeeded' when a later 'succeeded' listener fails: the first of the two counts.
  context.on('succeeded', settle(() => runner.runReserved(row, claimedBy)))
  context.on('failed', settle(() => runner.unreserve()))
  return true
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
