import cds from '@sap/cds'
import { markRelayed } from '../cap/messaging'
import type { DecodedMessage } from '../codec'
import type { MessageRow } from '../interfaces'
import { beforeBegin, transactionOfContext } from '../cap/transactions'
import { processing } from '../telemetry/spans'
import { wireHeaders } from '../wire'
import { brokerWaits } from './broker-waits'
import { throwIfTenantGone } from './lease'

/**
 * Dispatching a stored message to its service as an inbound adapter would: in a transaction of that service, with
 * the stored event context (the stored user as a privileged user, tenant, locale, correlation id, features); the
 * tenant is the one whose database holds the message.
 */

/**
 * What the handler sees as `req.queue`, besides CAP's scheduling fields: the stable message ID, the attempt, and a
 * signal that aborts on shutdown (after the grace period), on lease loss and after `handlerTimeout`.
 */
export interface QueueInfoAtRuntime {
  messageId: string
  attempt: number
  signal: AbortSignal
  [key: string]: unknown
}

export function runtimeInfo(row: MessageRow, signal: AbortSignal): QueueInfoAtRuntime {
  return { messageId: row.ID, attempt: row.attempts + 1, signal }
}

/** The event to dispatch; `headers`: the stored ones with what goes on the wire (lib/wire.ts). */
export function eventFor(message: DecodedMessage, runtime?: QueueInfoAtRuntime, headers = message.request.headers): cds.Event {
  const request = headers === message.request.headers ? message.request : { ...message.request, headers }
  const init = (runtime ? { ...request, queue: { ...request.queue, ...runtime } } : { ...request }) as { event: string }
  const event = message.fromSend ? new cds.Request(init) : new cds.Event(init)
  // A broker adapter of CAP then fails at once while disconnected, and the queue retries, instead of holding it.
  markRelayed(event)
  return event
}

export function contextFor(message: DecodedMessage): Record<string, unknown> {
  const { id, locale, features } = message.context
  // The runner claims in a tenant's database (lib/tenants): that tenant is the message's, whatever a row others
  // wrote says; a single tenant app runs with none current, so there the stored one counts.
  const tenant = cds.context?.tenant ?? message.context.tenant
  const Privileged = cds.User.Privileged as unknown as new (id: string) => cds.User
  const context: Record<string, unknown> = { user: new Privileged(message.userId ?? 'anonymous') }
  if (id) context.id = id
  if (tenant) context.tenant = tenant
  if (locale) context.locale = locale
  if (features) context.features = features
  return context
}

/**
 * Messages share a transaction only with the same tenant, user, locale and features: the database session of a
 * transaction carries them (`$user`, `$tenant`, localized views), set once when it begins.
 */
export function sessionKey(message: DecodedMessage): string {
  const { tenant, locale, features } = message.context
  return JSON.stringify([tenant, message.userId, locale, features])
}

/** The parts of a service the dispatcher uses, typed as CAP behaves (cds-types is narrower). */
export interface Service {
  tx(ctx: object, fn: (tx: Service) => Promise<unknown>): Promise<unknown>
  dispatch(event: cds.Event): Promise<unknown>
}

/** The service a message is for, never its queued proxy. */
export async function serviceOf(message: DecodedMessage): Promise<Service> {
  return cds.unqueued(await cds.connect.to(message.serviceName)) as unknown as Service
}

/**
 * Dispatches a message in a transaction of its service with the stored event context: `req.on('succeeded')` works,
 * and `inTx` runs in the same transaction after the handlers, with their result; `atStart` before them, before the
 * transaction's first statement; `claimed`: the message's row, whose identity it carries on the wire (none in the
 * in-memory queue).
 * Once the message's tenant is unsubscribed (its signal says so), the transaction's database part does not begin:
 * neither the handlers' statements nor the completion open the tenant's database again.
 */
export async function dispatchInTx(
  message: DecodedMessage,
  runtime: QueueInfoAtRuntime | undefined,
  inTx: (srv: cds.Service, result: unknown) => Promise<void>,
  { atStart, claimed }: { atStart?: () => void; claimed?: MessageRow } = {}
): Promise<void> {
  const srv = await serviceOf(message)
  if (runtime) brokerWaits.admit(message)
  await srv.tx(contextFor(message), async tx => {
    const db = runtime && transactionOfContext()
    if (db) beforeBegin(db, () => throwIfTenantGone(runtime.signal))
    atStart?.()
    const result = await tx.dispatch(eventFor(message, runtime, wireHeaders(srv as unknown as cds.Service, message, claimed)))
    if (runtime) throwIfTenantGone(runtime.signal)
    await inTx(srv as unknown as cds.Service, result)
  })
}

/** Runs one attempt of a claimed message in its trace: the span of its handler continues the trace of its enqueue. */
export function traced<T>(row: MessageRow, message: DecodedMessage, run: () => Promise<T>): Promise<T> {
  return processing(row.target, { ID: row.ID, tenant: message.context.tenant, traceContext: message.traceContext }, run)
}

/** Runs a message once, now, without a row (the in-memory queue). */
export function dispatchNow(message: DecodedMessage): Promise<void> {
  return dispatchInTx(message, undefined, async () => {})
}
