import cds from '@sap/cds'
import { createHash } from 'crypto'
import { DEFAULT_MESSAGE_ID_SOURCES } from '../config/receivers'
import { storedError } from '../failures'
import type { MessageIdSource, NewMessage, QueueSettings, ReceiptRef, ReceiverSettings } from '../interfaces'
import type { QueueStore } from '../store'
import { countDuplicate, countRefused } from '../telemetry/metrics'
import { LOG } from '../log'
import { clock } from '../time/clock'
import { fitsKeyColumn, recordProcessed, scopeOf } from './receipts'

/**
 * The idempotent inbox. An inboxed messaging service (`inboxed: true`, whatever its kind: CAP's adapters hand every
 * inbound message to `processInboundMsg`, which queues it through `cds.queued`, see lib/cap/messaging.ts) records the
 * identity of each inbound message in the transaction that writes the message to the inbox. A redelivery of an event
 * recorded before — its first copy waiting, running or processed — is counted and dropped: the broker gets its
 * acknowledgement, the subscriber does not run again. The receipt is marked processed in the subscriber's own
 * transaction and kept for its queue's `receiptRetention` from then on.
 *
 * What identifies an event is its ID where that ID is unique: CloudEvents makes `source` + `id` unique, so an ID from
 * the headers of a message with a `source` counts within that source; any other ID (`x-message-id`, a path into the
 * data) within the message's topic.
 *
 * An inbound message its queue refuses (above `maxMessageSize`, an invalid ordering key) would be refused on every
 * redelivery, and a broker that redelivers it blocks the messages behind it: it is written as a dead letter
 * instead, which an operator sees, revives or deletes, and the broker gets its acknowledgement.
 */

type Inbound = { event?: string; data?: unknown; headers?: Record<string, unknown> }

/** The header `name` of an inbound message, in any case. */
function header(message: Inbound, name: string): unknown {
  const headers = message.headers ?? {}
  const lower = name.toLowerCase()
  const key = Object.keys(headers).find(h => h.toLowerCase() === lower)
  return key === undefined ? undefined : headers[key]
}

/** The value at `source` of an inbound message: a header (any case), or a path into its data. */
function valueAt(message: Inbound, source: MessageIdSource): unknown {
  if (source.in === 'headers') return header(message, source.path[0])
  return source.path.reduce<unknown>((value, step) => (value && typeof value === 'object' ? (value as Record<string, unknown>)[step] : undefined), message.data)
}

/** The ID of an inbound message, with the source it came from: the first source with a string or number. */
function messageIdOf(message: Inbound, sources: MessageIdSource[]): { ID: string; from: MessageIdSource } | undefined {
  for (const from of sources) {
    const value = valueAt(message, from)
    const ID = typeof value === 'number' && Number.isFinite(value) ? String(value) : value
    if (typeof ID === 'string' && ID !== '') return { ID, from }
  }
  return undefined
}

/** Where `ID` is unique: the CloudEvents source of a message that has one, for an ID from its headers; else its topic. */
function originOf(message: Inbound, from: MessageIdSource): { source: string } | { topic: string } {
  const source = from.in === 'headers' ? header(message, 'source') : undefined
  return typeof source === 'string' && source !== '' ? { source } : { topic: message.event ?? '' }
}

/** `key` as the key column holds it: as it is, or hashed where too long (or holding a NUL, which PostgreSQL refuses). */
const keyColumn = (key: string) => (fitsKeyColumn(key) ? key : `sha256:${createHash('sha256').update(key).digest('hex')}`)

/**
 * The receipt of an inbound message: `ref`, its identity (`{"source":…,"id":…}` or `{"topic":…,"id":…}`, unambiguous
 * whatever the values hold); `former`, the key earlier versions of the plugin recorded it under (its ID alone), which a
 * redelivery of a message they received still finds.
 */
export interface InboundReceipt {
  ref: ReceiptRef
  former: ReceiptRef
}

const describeSources = (sources: MessageIdSource[]) => sources.map(s => `${s.in}.${s.path.join('.')}`).join(', ')

export class Inbox {
  private readonly warned = new Set<string>()

  constructor(
    private readonly receivers: ReceiverSettings,
    private readonly appid: string | undefined
  ) {}

  /** The receipt an inbound message of `service` gets; undefined where the service deduplicates nothing. */
  receiptOf(service: string, message: Inbound): InboundReceipt | undefined {
    const sources = this.receivers.inboxes.get(service) ?? DEFAULT_MESSAGE_ID_SOURCES
    if (sources === false) return undefined
    const found = messageIdOf(message, sources)
    if (found) {
      const scope = scopeOf('inbox', service, this.appid)
      const identity = JSON.stringify({ ...originOf(message, found.from), id: found.ID })
      return { ref: { scope, ID: keyColumn(identity) }, former: { scope, ID: keyColumn(found.ID) } }
    }
    if (!this.warned.has(service)) {
      this.warned.add(service)
      LOG.warn(`inbox ${service}: an inbound message ${JSON.stringify(message.event)} has no ID in ${describeSources(sources)}; such messages are not deduplicated (set inboxed.messageId of cds.requires.${service})`)
    }
    return undefined
  }

  /**
   * Writes `message`, an inbound message of `service` that its queue refused at enqueue (`refusal`), as a dead letter
   * in the current transaction, in place of the inbox row: its receipt (if any) is recorded already, so a redelivery is
   * dropped as for any message received. Revived, it runs as any inbox row: its subscriber gets it as it came,
   * without an ordering key, whatever its size.
   */
  async keepRefused(store: QueueStore, service: string, message: NewMessage, refusal: Error, queue: QueueSettings, tenant: string | undefined): Promise<void> {
    const lastError = queue.storeLastError ? storedError(refusal, queue.maxErrorLength, cds.root) : null
    await store.insertDeadLetter(message, { attempts: queue.maxAttempts, lastError, at: clock.now() })
    countRefused(service, tenant, { error: refusal })
    LOG.error(`${queue.name}: an inbound message ${JSON.stringify(message.event)} of ${service} was refused and is a dead letter (${message.ID}):`, refusal.message)
  }

  /**
   * Records `receipt` in the current transaction, the one that writes the message to the inbox `queue`; false for a
   * redelivery of a message received before (counted, on the receipt that recorded it): it must not be written again.
   */
  async receive(store: QueueStore, receipt: InboundReceipt, queue: string, tenant: string | undefined): Promise<boolean> {
    const { ref, former } = receipt
    if (!(await store.countRedelivery(former)) && (await store.receive(ref, Date.now()))) return true
    countDuplicate(ref.scope, tenant)
    LOG.info(`${queue}: dropped a redelivery of message ${ref.ID} (${ref.scope}): it was received before`)
    return false
  }
}

/** Marks an inbound message's receipt processed, in its subscriber's transaction, kept for `retention` ms. */
export function processed(receipt: ReceiptRef, retention: number): Promise<void> {
  return recordProcessed(receipt, Date.now(), retention)
}
