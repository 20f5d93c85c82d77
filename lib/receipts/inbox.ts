import cds from '@sap/cds'
import { createHash } from 'crypto'
import { DEFAULT_MESSAGE_ID_SOURCES } from '../config'
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
 * ID of each inbound message in the transaction that writes the message to the inbox. A redelivery of an ID recorded
 * before — its first copy waiting, running or processed — is counted and dropped: the broker gets its
 * acknowledgement, the subscriber does not run again. The receipt is marked processed in the subscriber's own
 * transaction and kept for its queue's `receiptRetention` from then on.
 *
 * An inbound message its queue refuses (above `maxMessageSize`, an invalid ordering key) would be refused on every
 * redelivery, and a broker that redelivers it holds back the messages behind it: it is written as a dead letter
 * instead, which an operator sees, revives or deletes, and the broker gets its acknowledgement.
 */

type Inbound = { event?: string; data?: unknown; headers?: Record<string, unknown> }

/** The value at `source` of an inbound message: a header (any case), or a path into its data. */
function valueAt(message: Inbound, source: MessageIdSource): unknown {
  if (source.in === 'headers') {
    const headers = message.headers ?? {}
    const name = source.path[0].toLowerCase()
    const key = Object.keys(headers).find(h => h.toLowerCase() === name)
    return key === undefined ? undefined : headers[key]
  }
  return source.path.reduce<unknown>((value, step) => (value && typeof value === 'object' ? (value as Record<string, unknown>)[step] : undefined), message.data)
}

/** The ID of an inbound message: the first source with a string or number; one too long for the column, hashed. */
function messageIdOf(message: Inbound, sources: MessageIdSource[]): string | undefined {
  for (const source of sources) {
    const value = valueAt(message, source)
    const ID = typeof value === 'number' && Number.isFinite(value) ? String(value) : value
    if (typeof ID !== 'string' || ID === '') continue
    return fitsKeyColumn(ID) ? ID : `sha256:${createHash('sha256').update(ID).digest('hex')}`
  }
  return undefined
}

const describeSources = (sources: MessageIdSource[]) => sources.map(s => `${s.in}.${s.path.join('.')}`).join(', ')

export class Inbox {
  private readonly warned = new Set<string>()

  constructor(
    private readonly receivers: ReceiverSettings,
    private readonly appid: string | undefined
  ) {}

  /** The receipt an inbound message of `service` gets; undefined where the service deduplicates nothing. */
  receiptOf(service: string, message: Inbound): ReceiptRef | undefined {
    const sources = this.receivers.inboxes.get(service) ?? DEFAULT_MESSAGE_ID_SOURCES
    if (sources === false) return undefined
    const ID = messageIdOf(message, sources)
    if (ID !== undefined) return { scope: scopeOf('inbox', service, this.appid), ID }
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
   * redelivery of a message received before (counted): it must not be written again.
   */
  async receive(store: QueueStore, receipt: ReceiptRef, queue: string, tenant: string | undefined): Promise<boolean> {
    if (await store.receive(receipt, Date.now())) return true
    countDuplicate(receipt.scope, tenant)
    LOG.info(`${queue}: dropped a redelivery of message ${receipt.ID} (${receipt.scope}): it was received before`)
    return false
  }
}

/** Marks an inbound message's receipt processed, in its subscriber's transaction, kept for `retention` ms. */
export function processed(receipt: ReceiptRef, retention: number): Promise<void> {
  return recordProcessed(receipt, Date.now(), retention)
}
