import cds from '@sap/cds'
import { runInContext } from './contexts'

/**
 * CAP internals of `cds.MessagingService` that a broker adapter uses, as CAP's own adapters (redis-messaging.js,
 * kafka.js, file-based.js) use them:
 * - `srv.message4(msg)` is an outbound message as it goes on the wire: `event` is the topic (`publishPrefix`
 *   applied), `headers` are prepared (the CloudEvents attributes with `format: 'cloudevents'`);
 * - `srv.subscribedTopics` maps each subscribed topic (`subscribePrefix` applied) to its event, filled by `srv.on`;
 * - `srv.processInboundMsg(ctx, msg)` hands an inbound message to the subscribers in a transaction, through the
 *   inbox (`cds.queued(srv)`) when the service is `inboxed`: it resolves once that transaction committed (the inbox
 *   row, or the subscriber's own writes) and rejects when it failed, so a broker acknowledges only after it resolved;
 * - `msg._fromOutbox` marks a message a queue relays: CAP's Redis and AMQP adapters then fail at once while their
 *   connection is down, instead of holding the message until the connection is back;
 * - an adapter's `handle` hands an outbound message to its broker itself, without the phases of `cds.Service`'s
 *   `handle`: no `before`, `on` or `after` handler of the service runs for it (the relay, lib/runner/relay.ts, has
 *   none to keep when it publishes a batch);
 * - the Redis adapter's outbound `handle` (`redis-messaging`) is a PUBLISH on its node-redis client and nothing else,
 *   so several may run at once: the client writes the commands issued in one tick together, one round trip.
 *
 * CAP internals of its messaging services that the consumer half relies on (lib/wire.ts, lib/receipts/inbox.ts):
 * - outbound, `prepareHeaders` (called as the message is handed to the broker) sets CloudEvents' `id` and `time`
 *   (`format: 'cloudevents'`, the service's option) only where the headers have none: an `id` and `time` the queue
 *   puts there go on the wire; without them every attempt gets a new `id`; likewise `source`, which CAP's own
 *   services make up as `/default/sap.cap/<pid>`, another in each process;
 * - inbound, every adapter hands a message to `processInboundMsg`, which marks it `inbound` and, where the service's
 *   `inboxed` (or `inbox`) option is truthy — an object too —, queues it through the global `cds.queued`.
 * Remote services (`kind: 'odata' | 'rest'`) send the headers of a request as HTTP request headers.
 * Contract: test/cap/cap-contract.test.js "messaging".
 */

/** A message as CAP's messaging services carry it. */
export interface BrokerMessage {
  event: string
  data: unknown
  headers: Record<string, unknown>
}

/** An inbound message as a broker adapter hands it over; `queue`: properties its stored copy in the inbox keeps. */
export interface InboundMessage extends Partial<BrokerMessage> {
  event: string
  queue?: Record<string, unknown>
}

interface MessagingInternals {
  message4(msg: object): BrokerMessage
  subscribedTopics: Map<string, string>
  _listenToAll: { value: boolean }
  processInboundMsg(ctx: object, msg: object): Promise<unknown>
}

const internals = (srv: cds.MessagingService) => srv as unknown as MessagingInternals

/** The outbound message `msg` as the broker is to get it: the topic as `event`, the prepared headers. */
export function outbound(srv: cds.MessagingService, msg: object): BrokerMessage {
  const prepared = internals(srv).message4(msg)
  return { event: prepared.event, data: prepared.data, headers: prepared.headers ?? {} }
}

/** The topics the service's subscribers listen to, as the broker names them. */
export function subscribedTopics(srv: cds.MessagingService): string[] {
  return [...internals(srv).subscribedTopics.keys()]
}

/** Whether a subscriber listens to every topic (`srv.on('*')`). */
export function listensToAll(srv: cds.MessagingService): boolean {
  return internals(srv)._listenToAll.value
}

/**
 * Hands a message the broker delivered (or delivers again) to the subscribers, in `tenant`, through the inbox for an
 * `inboxed` service; resolves once the transaction holding its effect (the inbox row or the subscriber's writes)
 * committed. In an event context of its own, as an adapter's callback runs: `processInboundMsg` sets the tenant of
 * `cds.context`, which must not carry over to the next message.
 */
export async function deliverInbound(srv: cds.MessagingService, tenant: string | undefined, msg: InboundMessage): Promise<void> {
  await runInContext({ tenant }, () => internals(srv).processInboundMsg(tenant ? { tenant } : {}, { ...msg }))
}

/** Marks a message the queue relays, so that CAP's broker adapters fail fast while disconnected. */
export function markRelayed(event: object): void {
  ;(event as { _fromOutbox?: boolean })._fromOutbox = true
}

/**
 * Whether `srv` is CAP's Redis adapter, whose outbound messages may be dispatched at once to go out together (see
 * above); by its configured kind, so a kind of the app's own built on it is not taken for it.
 */
export function publishesConcurrently(srv: cds.Service): boolean {
  return srv instanceof cds.MessagingService && (srv as { options?: { kind?: unknown } }).options?.kind === 'redis-messaging'
}

/** Whether `srv` is a messaging service and `msg` one it sends to its broker (not one it received). */
export function isOutboundMessage(srv: cds.Service, msg: object): boolean {
  return srv instanceof cds.MessagingService && !isInboundMessage(msg)
}

/**
 * Whether the CloudEvents `source` `srv` makes up for a message that has none names this process: CAP's messaging
 * services say `/default/sap.cap/<pid>` (SAP Event Mesh's adapters name the namespace instead).
 */
export function sourceNamesProcess(srv: cds.MessagingService): boolean {
  return outbound(srv, { event: 'source', data: {} }).headers.source === `/default/sap.cap/${process.pid}`
}

/** Whether a messaging service sends CloudEvents, where CAP's `prepareHeaders` reads it. */
export function sendsCloudEvents(srv: cds.Service): boolean {
  return (srv as { options?: { format?: unknown } }).options?.format === 'cloudevents'
}

/** Whether a queued request is an inbound message an inboxed messaging service received. */
export function isInboundMessage(req: object): boolean {
  return (req as { inbound?: unknown }).inbound === true
}
