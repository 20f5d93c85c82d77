import type cds from '@sap/cds'
import { appName } from './app-name'
import { isOutboundMessage, sendsCloudEvents, sourceNamesProcess } from './cap/messaging'
import type { DecodedMessage } from './codec'
import type { MessageRow } from './interfaces'
import { uuidOf } from './uuids'

/**
 * What a relayed message carries on the wire, so its consumer can deduplicate and order it (the consumer half):
 * the queue's message ID, the same on every attempt and in every instance; when it was enqueued; the sequence number
 * of its ordering key. A messaging service gets them as CloudEvents attributes (`format: 'cloudevents'`) or as
 * headers; a remote service with `idempotencyKey` gets the ID in that header. What the application set wins.
 * CAP's messaging services keep an `id`, `time` and `source` they are given (lib/cap/messaging.ts).
 */

/** The header of the message ID where the format is not CloudEvents. */
export const MESSAGE_ID_HEADER = 'x-message-id'
/** The header of the ordering key's sequence number where the format is not CloudEvents. */
export const SEQUENCE_HEADER = 'x-ordering-sequence'
/**
 * CloudEvents' sequence extension orders its values as strings: numbers are zero-padded to the digits of the
 * largest number JavaScript counts exactly.
 */
const SEQUENCE_DIGITS = String(Number.MAX_SAFE_INTEGER).length

/** One delivery of a claimed row, the same on each of its attempts. */
interface Delivery {
  /** The row's ID; for a task, an ID of the occurrence (each occurrence of a recurring task is an event of its own). */
  id: string
  /** When it was enqueued (for a task or a delayed message: when it fell due), ISO. */
  time: string
  orderingKey?: string
}

/** The delivery of a claimed row: the same on each of its attempts and in every instance. */
function deliveryOf(row: MessageRow): Delivery {
  const id = row.task ? uuidOf(`${row.ID}@${row.timestamp}`, 8) : row.ID
  const delivery: Delivery = { id, time: new Date(row.timestamp).toISOString() }
  if (row.orderingKey) delivery.orderingKey = row.orderingKey
  return delivery
}

function hasHeader(headers: Record<string, unknown>, name: string): boolean {
  const lower = name.toLowerCase()
  return Object.keys(headers).some(h => h.toLowerCase() === lower)
}

/** The IETF draft defines `Idempotency-Key` as a Structured Field string (RFC 8941): quoted. */
export function structuredString(value: string): string {
  return `"${value.replace(/[\\"]/g, c => `\\${c}`)}"`
}

/**
 * CloudEvents identify an event by `source` + `id`: a consumer's inbox too (lib/receipts/inbox.ts). Where a service
 * would name the process as the source (CAP's own services), a message published again by another instance or after
 * a restart would be another event; it names the app instead.
 */
const sources = new WeakMap<cds.Service, string | null>()
function appSourceFor(srv: cds.Service): string | null {
  let source = sources.get(srv)
  if (source === undefined) sources.set(srv, (source = sourceNamesProcess(srv as cds.MessagingService) ? `/default/sap.cap/${appName()}` : null))
  return source
}

/** What a messaging service's consumer learns of the delivery, in the service's format. */
function messagingHeaders(srv: cds.Service, delivery: Delivery, sequence: number | undefined): Record<string, unknown> {
  if (!sendsCloudEvents(srv)) {
    return { [MESSAGE_ID_HEADER]: delivery.id, ...(sequence !== undefined && { [SEQUENCE_HEADER]: sequence }) }
  }
  const headers: Record<string, unknown> = { id: delivery.id, time: delivery.time }
  const source = appSourceFor(srv)
  if (source) headers.source = source
  if (sequence !== undefined) headers.sequence = String(sequence).padStart(SEQUENCE_DIGITS, '0')
  // CloudEvents' partitioning extension: the key the sequence counts in
  if (sequence !== undefined && delivery.orderingKey) headers.partitionkey = delivery.orderingKey
  return headers
}

/**
 * The headers `message` is dispatched to `srv` with: what was stored, plus the identity of the delivery of its claimed
 * `row` where the target passes it on (never replacing a header the application set). The stored ones where there is
 * no row (the in-memory queue) or the target passes nothing on: most targets, so the delivery is derived only here.
 */
export function wireHeaders(srv: cds.Service, message: DecodedMessage, row: MessageRow | undefined): Record<string, unknown> | undefined {
  const stored = message.request.headers
  if (!row) return stored
  const own = stored ?? {}
  let added: Record<string, unknown> = {}
  if (isOutboundMessage(srv, message.request)) added = messagingHeaders(srv, deliveryOf(row), message.request.queue?.sequence)
  else if (message.idempotencyKey) added = { [message.idempotencyKey]: structuredString(deliveryOf(row).id) }
  const missing = Object.entries(added).filter(([name]) => !hasHeader(own, name))
  return missing.length ? { ...own, ...Object.fromEntries(missing) } : stored
}
