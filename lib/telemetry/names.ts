/**
 * The names this plugin reports under: OpenTelemetry's messaging semantic conventions
 * (https://opentelemetry.io/docs/specs/semconv/messaging/) where they have one, the plugin's own namespace
 * (`cds_event_queues.`) for the queue's gauges. Written out: the conventions' constants are only in the unstable
 * part of @opentelemetry/semantic-conventions, which a library should not depend on.
 */

/** `messaging.system`: the queue is a table of the app's database, not a broker; this names it. */
export const MESSAGING_SYSTEM = 'cds_event_queues'
/** The instrumentation scope of every meter and tracer. */
export const SCOPE = 'cds-event-queues'

export const ATTR = {
  system: 'messaging.system',
  destination: 'messaging.destination.name',
  operationName: 'messaging.operation.name',
  operationType: 'messaging.operation.type',
  messageId: 'messaging.message.id',
  errorType: 'error.type',
  tenant: 'sap.tenancy.tenant_id',
  state: 'cds_event_queues.message.state',
  breakerState: 'cds_event_queues.circuit_breaker.state',
  receiver: 'cds_event_queues.receiver',
  service: 'cds_event_queues.service'
} as const

export const METRIC = {
  sent: 'messaging.client.sent.messages',
  consumed: 'messaging.client.consumed.messages',
  processDuration: 'messaging.process.duration',
  messages: 'cds_event_queues.messages',
  relayLag: 'cds_event_queues.relay_lag',
  paused: 'cds_event_queues.paused',
  breaker: 'cds_event_queues.circuit_breaker',
  deleted: 'cds_event_queues.dead_letters.deleted',
  duplicates: 'cds_event_queues.duplicates',
  refused: 'cds_event_queues.inbound.refused',
  dropped: 'cds_event_queues.inbound.dropped',
  brokerWaiting: 'cds_event_queues.broker.waiting',
  brokerWaitingFor: 'cds_event_queues.broker.waiting_for'
} as const

/** The operations the plugin reports: an enqueue sends a message to its queue, a handler processes it. */
export const SEND = { name: 'send', type: 'send' } as const
export const PROCESS = { name: 'process', type: 'process' } as const
export type Operation = typeof SEND | typeof PROCESS

/** What an instrument or span is about: the queue, the operation, and the tenant where the app has tenants. */
export function attributesOf(queue: string, tenant: string | undefined, operation?: Operation): Record<string, string> {
  const attributes: Record<string, string> = { [ATTR.system]: MESSAGING_SYSTEM, [ATTR.destination]: queue }
  if (operation) Object.assign(attributes, { [ATTR.operationName]: operation.name, [ATTR.operationType]: operation.type })
  if (tenant) attributes[ATTR.tenant] = tenant
  return attributes
}

/**
 * `error.type`: low in cardinality, as the conventions ask: the error's code (`ECONNREFUSED`, CAP's status codes,
 * the plugin's `HANDLER_TIMEOUT`), else its class name, else `_OTHER`.
 */
export function errorType(error: unknown): string {
  const { code, name } = (error ?? {}) as { code?: unknown; name?: unknown }
  if (typeof code === 'string' && code) return code
  if (typeof code === 'number') return String(code)
  if (error instanceof Error) return typeof name === 'string' && name ? name : error.constructor.name
  return '_OTHER'
}
