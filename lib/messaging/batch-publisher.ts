/**
 * A messaging service that publishes several outbound messages in one round trip to its broker: what the relay
 * (lib/runner/relay.ts) asks of a kind to send a batch's messages together. The kind 'redis-streams' is one (its
 * XADDs go out as one pipeline). No CAP runtime here: the runner imports it, and only the broker adapters may load
 * `cds.MessagingService` (see messaging-service.ts).
 */

/** The method's key: a symbol, so no service of CAP's or of an app has it by chance. */
export const publishAll = Symbol.for('cds-event-queues.publishAll')

/** An outbound message as the relay hands it over: the request as stored, with the headers that go on the wire. */
export interface OutboundMessage {
  event: string
  data?: unknown
  headers?: Record<string, unknown>
}

export interface BatchPublisher {
  /**
   * Publishes `messages` as `srv.emit` of each would (CAP's `message4`: topic, prepared headers; the tenant of
   * `cds.context`), all in one round trip: one promise per message, in their order, settled by the broker's answer to
   * that message alone. Sent before it returns, so a caller may await them in any order.
   */
  [publishAll](messages: OutboundMessage[]): Promise<void>[]
}

export function publishesBatches(srv: object): srv is BatchPublisher {
  return typeof (srv as Partial<BatchPublisher>)[publishAll] === 'function'
}
