import type cds from '@sap/cds'
import { hasHandlerFor } from '../cap/handlers'
import { encode, type DecodedMessage, type Dispatchable, type Encoded } from '../codec'
import { errorData } from '../failures'
import type { HeaderRule } from '../interfaces'

/**
 * `<event>/#succeeded` and `<event>/#failed`: queued messages themselves, written in the transaction that records
 * the outcome, so a callback is as durable as the outcome it reports.
 */

const SUCCEEDED = '/#succeeded'
const FAILED = '/#failed'

function isCallback(event: string | undefined): boolean {
  return !!event && (event.endsWith(SUCCEEDED) || event.endsWith(FAILED))
}

/** Whether a success of `message` writes a `<event>/#succeeded` callback: someone listens, and it is no callback itself. */
export function hasSucceededCallback(srv: cds.Service, message: DecodedMessage): boolean {
  const { event } = message.request
  return !isCallback(event) && hasHandlerFor(srv, event + SUCCEEDED)
}

/** The callback message to write for an outcome, or undefined if nobody listens or the message is a callback. */
export function callbackFor(
  srv: cds.Service,
  message: DecodedMessage,
  outcome: { succeeded: unknown } | { failed: unknown },
  secretHeader: HeaderRule
): Encoded | undefined {
  const { request } = message
  if (isCallback(request.event)) return undefined
  const event = request.event + ('succeeded' in outcome ? SUCCEEDED : FAILED)
  if (!hasHandlerFor(srv, event)) return undefined
  const results = 'succeeded' in outcome ? outcome.succeeded : errorData(outcome.failed)
  // a callback is a message of its own: no task, no place in its ordering key's sequence, no inbound receipt
  const { after: _a, every: _e, task: _t, sequence: _s, receipt: _r, ...queue } = request.queue ?? {}
  const callback: Dispatchable = { ...request, event, results, queue, _fromSend: message.fromSend }
  const context = { ...message.context, user: { id: message.userId } }
  // A callback continues the trace of the message it reports on.
  const { traceContext } = message
  try {
    return encode(callback, context, message.serviceName, secretHeader, { traceContext })
  } catch {
    // A result that is not JSON must not undo a successful message: the callback gets no result instead.
    return encode({ ...callback, results: undefined }, context, message.serviceName, secretHeader, { traceContext })
  }
}
