import cds from '@sap/cds'
import { deliverInbound, isInboundMessage } from '../cap/messaging'
import { eventOf, type DecodedMessage } from '../codec'
import type { MessageRow, Outcome } from '../interfaces'
import { dispatchInTx, runtimeInfo, traced } from './dispatch'
import { LOG } from '../log'

/**
 * The duplicate-delivery test mode (`cds.requires.queue.deliver: 'twice'`): at-least-once delivery made visible in an
 * app's own tests. Once a message's delivery has committed, it is delivered a second time in a transaction of its own,
 * with the same `req.queue` (message ID, attempt): a handler that is not idempotent fails or writes twice, which the
 * app's tests see. An inbound message of an inboxed messaging service is received a second time instead, as a broker
 * redelivers it (with the same data and headers, so the inbox's own deduplication takes part). A second delivery
 * that fails is logged as an error and counted; it changes nothing of the first.
 */

/** Marks the copy of an inbound message received a second time (its `req.queue`): the copy is not received again. */
const COPY_OF = 'duplicateOf'

/** A second delivery that failed. */
export interface DuplicateFailure {
  /** The message delivered twice (for an inbound message: the first copy's). */
  ID: string
  queue: string
  service: string
  event: string | undefined
  error: unknown
}

/** What the test mode did in this process. */
export interface DuplicateDeliveries {
  /** Messages delivered (inbound messages: handed over) a second time. */
  delivered: number
  /** Second deliveries that failed. */
  failed: number
  /** The latest of them, at most `KEPT_FAILURES`. */
  failures: DuplicateFailure[]
}

/** Failures kept for `report()`: a test suite reads them as it goes, and a long one must not grow without bound. */
const KEPT_FAILURES = 100

export class Redelivery {
  private delivered = 0
  private failed = 0
  private readonly failures: DuplicateFailure[] = []

  report(): DuplicateDeliveries {
    return { delivered: this.delivered, failed: this.failed, failures: [...this.failures] }
  }

  /**
   * Once the outcome of an attempt is written: delivers a message that succeeded a second time. Of the copy of an
   * inbound message, a failed first attempt is its second delivery's failure (later ones are its retries).
   */
  async after(row: MessageRow, outcome: Outcome, message: DecodedMessage | undefined, signal: AbortSignal): Promise<void> {
    if (!message || signal.aborted) return
    const copyOf = message.request.queue?.[COPY_OF]
    if (typeof copyOf === 'string') {
      if ((outcome.kind === 'retry' || outcome.kind === 'dead') && row.attempts === 0) this.fail(copyOf, row, message, outcome.error)
      return
    }
    if (outcome.kind !== 'succeeded') return
    try {
      await this.deliverAgain(row, message, signal)
      this.delivered++
    } catch (error) {
      this.fail(row.ID, row, message, error)
    }
  }

  private async deliverAgain(row: MessageRow, message: DecodedMessage, signal: AbortSignal): Promise<void> {
    const { event, data, headers } = message.request
    if (isInboundMessage(message.request) && event) {
      const tenant = cds.context?.tenant ?? message.context.tenant
      const srv = (await cds.connect.to(message.serviceName)) as cds.MessagingService
      return deliverInbound(srv, tenant, { event, data, headers, queue: { [COPY_OF]: row.ID } })
    }
    return traced(row, message, () => dispatchInTx(message, runtimeInfo(row, signal), async () => {}, { claimed: row }))
  }

  private fail(ID: string, row: MessageRow, message: DecodedMessage, error: unknown): void {
    const failure: DuplicateFailure = { ID, queue: row.target, service: message.serviceName, event: eventOf(message.request), error }
    this.failed++
    this.failures.push(failure)
    if (this.failures.length > KEPT_FAILURES) this.failures.shift()
    LOG.error(`${row.target}: message ${ID} (${failure.service} ${failure.event}) failed on its second delivery (deliver: 'twice'), so its handlers are not idempotent:`, error)
  }
}
