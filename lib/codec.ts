import cds from '@sap/cds'
import { storableQuery } from './cap/requests'
import { QueueError } from './errors'
import type { HeaderRule, NewMessage, QueueInfo, ReceiptRef, StoredContext, StoredMessage, TraceContext } from './interfaces'
import { clock } from './time/clock'

/**
 * The message codec: a request or event ⇄ the JSON in `cds.outbox.Messages.msg`, in the shape CAP's built-in
 * queue writes, so either can read the other's rows.
 */

const INTERNAL_USER = 'cds.internal.user'
const COPIED = ['inbound', 'event', 'data', 'headers', 'queue', 'results', 'method', 'path', 'params', 'entity'] as const

/**
 * `task` and `orderingKey` are String(255) columns. PostgreSQL counts their length in characters (code points) and
 * cannot store NUL; SQLite checks neither. Values are checked against this at the call, so every database accepts
 * and refuses the same ones, with the same error.
 */
export const NAME_RULE = 'at most 255 characters without NUL characters'

/** Whether `value` fits a String(255) name column on every database (see `NAME_RULE`). */
export function fitsNameColumn(value: string): boolean {
  return !value.includes('\u0000') && [...value].length <= 255
}

/** What a queued call looks like to the codec: a `cds.Event` or `cds.Request`. */
export interface Dispatchable {
  event?: string
  data?: unknown
  headers?: Record<string, unknown>
  query?: unknown
  queue?: QueueInfo
  reply?: unknown
  _fromSend?: boolean
  [key: string]: unknown
}

interface ContextLike {
  id?: string
  tenant?: string
  locale?: string
  user?: { id?: string }
  features?: Record<string, boolean>
}

function storedContext(context: ContextLike): StoredContext {
  const stored: StoredContext = {}
  if (context.id) stored.id = context.id
  if (context.tenant) stored.tenant = context.tenant
  if (context.locale) stored.locale = context.locale
  const features = context.features && Object.keys(context.features).filter(f => context.features?.[f])
  if (features?.length) stored.features = Object.fromEntries(features.map(f => [f, true]))
  return stored
}

/** Headers that carry credentials are never persisted, whoever put them on the request (the queue's rule, secrets.ts). */
function withoutSecrets(headers: Record<string, unknown> | undefined, secret: HeaderRule): Record<string, unknown> | undefined {
  if (!headers || typeof headers !== 'object') return headers
  return Object.fromEntries(Object.entries(headers).filter(([name, value]) => !secret(name, value)))
}

/**
 * What JSON.stringify would silently drop or mangle, described; undefined for what it keeps. `raw` is the value as
 * the payload holds it (a Buffer's `toJSON` hands the replacer `{ type, data }` instead).
 */
function mangled(raw: unknown): string | undefined {
  if (typeof raw === 'function' || typeof raw === 'symbol' || typeof raw === 'bigint') return `a ${typeof raw}`
  if (typeof raw === 'number' && !Number.isFinite(raw)) return String(raw)
  if (raw instanceof Map || raw instanceof Set || raw instanceof WeakMap || raw instanceof WeakSet) return `a ${raw.constructor.name}`
  if (Buffer.isBuffer(raw)) return 'a Buffer'
  if (ArrayBuffer.isView(raw) || raw instanceof ArrayBuffer) return `a ${raw.constructor.name}`
  return undefined
}

/**
 * JSON.stringify that refuses what it would silently drop or mangle (functions, BigInt, Map and Set become `{}`,
 * NaN and Infinity `null`, a Buffer `{ type, data }`), naming where it found it.
 */
function strictJSON(value: unknown, event: string | undefined): string {
  try {
    return JSON.stringify(value, function (this: Record<string, unknown>, key, v: unknown) {
      const what = mangled(this[key])
      if (what) throw new TypeError(`'${key}' is ${what}`)
      return v
    })
  } catch (e) {
    const reason = e instanceof Error ? e.message : String(e)
    throw new QueueError(
      `Cannot queue event ${JSON.stringify(event)}: its payload is not serialisable as JSON (${reason}). ` +
        'Queued data and headers must be plain JSON values: convert Maps and Sets to objects or arrays, binary data to base64 strings.',
      'UNSERIALISABLE_MESSAGE'
    )
  }
}

/** A request as the row stores it: the `msg` JSON, and the service and event it is for (the rows' index columns). */
export interface Encoded {
  msg: string
  service: string
  event: string | undefined
}

/** What the `event` column says of a request: its event, else the kind of its query, else its method and path. */
export function eventOf(req: Dispatchable): string | undefined {
  const query = req.query as Record<string, unknown> | undefined
  const event = req.event ?? (query && Object.keys(query).find(k => /^[A-Z]+$/.test(k))) ?? (req.method ? `${req.method} ${req.path ?? ''}` : undefined)
  return event?.slice(0, 255)
}

/** What the plugin stores with a message beside what the call gave. */
export interface Additions {
  /** The trace the message's handler continues (see lib/telemetry). */
  traceContext?: TraceContext
  /** An inbound message's receipt (lib/receipts): `req.queue.receipt`. */
  receipt?: ReceiptRef
  /** The header its message ID goes out in (lib/wire.ts). */
  idempotencyKey?: string
}

export function encode(req: Dispatchable, context: ContextLike, serviceName: string, secretHeader: HeaderRule, additions: Additions = {}): Encoded {
  const { traceContext, receipt, idempotencyKey } = additions
  const msg: StoredMessage = { [INTERNAL_USER]: context.user?.id, service: serviceName, context: storedContext(context) }
  if (traceContext) msg.traceContext = traceContext
  if (idempotencyKey) msg.idempotencyKey = idempotencyKey
  if (req._fromSend || req.reply) msg._fromSend = true
  for (const prop of COPIED) if (req[prop]) (msg as Record<string, unknown>)[prop] = req[prop]
  if (receipt) msg.queue = { ...msg.queue, receipt }
  if (msg.headers) msg.headers = withoutSecrets(msg.headers, secretHeader)
  if (req.query) {
    msg.query = storableQuery(req.query)
    delete msg.data // for queries, req.data is derived from req.query
  }
  return { msg: strictJSON(msg, req.event), service: serviceName, event: eventOf(req) }
}

/** Refuses a message above the queue's `maxMessageSize` at the enqueuing call, before anything is written. */
export function assertSize(msg: string, maxMessageSize: number, event: string | undefined): void {
  const size = Buffer.byteLength(msg, 'utf8')
  if (size <= maxMessageSize) return
  throw new QueueError(
    `Cannot queue event ${JSON.stringify(event)}: the message is ${size} bytes, above the queue's maxMessageSize of ` +
      `${maxMessageSize} bytes. Queue a reference to the data instead, or raise maxMessageSize.`,
    'MESSAGE_TOO_LARGE'
  )
}

/** A message as read back from a row, ready to dispatch. */
export interface DecodedMessage {
  serviceName: string
  userId?: string
  context: StoredContext
  request: Dispatchable
  fromSend: boolean
  traceContext?: TraceContext
  /** The header its message ID goes out in (see `Additions`). */
  idempotencyKey?: string
}

export class CorruptMessage extends QueueError {
  constructor(reason: string) {
    super(`Corrupt message: ${reason}`, 'CORRUPT_MESSAGE')
    this.name = 'CorruptMessage'
  }
}

export function decode(json: string, target: string): DecodedMessage {
  let parsed: unknown
  try {
    parsed = JSON.parse(json)
  } catch (e) {
    throw new CorruptMessage(`msg is not valid JSON (${(e as Error).message})`)
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new CorruptMessage('msg is not a JSON object')
  const { [INTERNAL_USER]: userId, service, context, _fromSend, traceContext, idempotencyKey, ...rest } = parsed as StoredMessage
  const request = rest as Dispatchable
  if (!request.event && !request.query) throw new CorruptMessage('msg has neither an event nor a query')
  if (request.query) request.query = (cds.ql as unknown as (cqn: object) => object)(request.query as object)
  // Rows of old CAP versions carry no `service`: their target was the service name.
  const decoded: DecodedMessage = { serviceName: service ?? target, userId, context: context ?? {}, request, fromSend: !!_fromSend, traceContext: storedTraceContext(traceContext) }
  if (typeof idempotencyKey === 'string') decoded.idempotencyKey = idempotencyKey
  return decoded
}

/** A stored trace context as far as it has the right shape; anything else is ignored, never a corrupt message. */
function storedTraceContext(value: unknown): TraceContext | undefined {
  const { traceparent, tracestate } = (value ?? {}) as Record<string, unknown>
  if (typeof traceparent !== 'string') return undefined
  return typeof tracestate === 'string' ? { traceparent, tracestate } : { traceparent }
}

/** The last timestamp issued for the present: messages enqueued one after another must get increasing timestamps. */
const lastIssued = { ms: 0, micros: 0 }

/**
 * CAP's timestamp format (ISO with 7 fractional digits) for the epoch milliseconds `ms`. Timestamps of the present
 * are strictly increasing within the process, in the order they are issued, because ordering keys run messages in
 * timestamp order: the digits below the millisecond count up per message (whole microseconds, since PostgreSQL
 * keeps no more), not the high-resolution clock, which is not aligned with the queue's clock and repeats within a
 * millisecond. Future timestamps (delays, cron fire times) are exact milliseconds. `present`: whether `ms` is the
 * present, said by the caller that read it: asking the clock again may answer a millisecond earlier (a new reading of
 * the database's clock in between), and a present time taken for a future one was stamped like the next message.
 */
export function timestampAt(ms: number, present = ms <= clock.now()): string {
  let micros = 0
  if (present) {
    if (ms <= lastIssued.ms) [ms, micros] = [lastIssued.ms, lastIssued.micros + 1]
    if (micros > 999) [ms, micros] = [ms + 1, 0]
    Object.assign(lastIssued, { ms, micros })
  }
  return new Date(ms).toISOString().replace('Z', `${String(micros).padStart(3, '0')}0Z`)
}

/** A new row for `encoded` on queue `target`, due after `afterMs`. */
export function newMessage(target: string, encoded: Encoded, afterMs = 0): NewMessage {
  const due = clock.now() + afterMs
  return row(target, encoded, due, timestampAt(due, afterMs <= 0))
}

/** A new row for `encoded` on queue `target`, due at the epoch milliseconds `due` (the time a cron task fires, exactly). */
export function messageDueAt(target: string, encoded: Encoded, due: number, task?: string, ID?: string): NewMessage {
  return row(target, encoded, due, timestampAt(due), task, ID)
}

function row(target: string, { msg, service, event }: Encoded, due: number, timestamp: string, task?: string, ID: string = cds.utils.uuid()): NewMessage {
  return { ID, timestamp, target, msg, task, dueAt: new Date(due), service, event }
}
