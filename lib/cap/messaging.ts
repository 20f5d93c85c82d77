import cds from '@sap/cds'

/**
 * CAP internals of its messaging services that the consumer half relies on (lib/wire.ts, lib/receipts/inbox.ts):
 * - outbound, `prepareHeaders` (called as the message is handed to the broker) sets CloudEvents' `id` and `time`
 *   (`format: 'cloudevents'`, the service's option) only where the headers have none: an `id` and `time` the queue
 *   puts there go on the wire; without them every attempt gets a new `id`;
 * - inbound, every adapter hands a message to `processInboundMsg`, which marks it `inbound` and, where the service's
 *   `inboxed` (or `inbox`) option is truthy — an object too —, queues it through the global `cds.queued`.
 * Remote services (`kind: 'odata' | 'rest'`) send the headers of a request as HTTP request headers.
 * Contract: test/cap-contract.test.js "messaging".
 */

/** Whether `srv` is a messaging service and `msg` one it sends to its broker (not one it received). */
export function isOutboundMessage(srv: cds.Service, msg: object): boolean {
  return srv instanceof cds.MessagingService && !isInboundMessage(msg)
}

/** Whether a messaging service sends CloudEvents, where CAP's `prepareHeaders` reads it. */
export function sendsCloudEvents(srv: cds.Service): boolean {
  return (srv as { options?: { format?: unknown } }).options?.format === 'cloudevents'
}

/** Whether a queued request is an inbound message an inboxed messaging service received. */
export function isInboundMessage(req: object): boolean {
  return (req as { inbound?: unknown }).inbound === true
}
