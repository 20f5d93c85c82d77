import { invalid } from '../errors'
import type { MessageIdSource } from '../interfaces'
import { HEADER_NAME, type Raw } from './values'

/** The options of a service that receives or calls out: `idempotencyKey` (a remote service), `inboxed` (a messaging service). */

/** The header the IETF draft "The Idempotency-Key HTTP Header Field" defines. */
export const IDEMPOTENCY_KEY_HEADER = 'Idempotency-Key'

/**
 * `idempotencyKey` of a (remote) service: `true` sends each queued call's message ID as `Idempotency-Key`, a header
 * name sends it under that name; `false` or nothing sends none. Undefined: none.
 */
export function idempotencyKeyHeader(conf: Raw, where: string): string | undefined {
  const value = conf.idempotencyKey
  if (value === undefined || value === null || value === false) return undefined
  if (value === true) return IDEMPOTENCY_KEY_HEADER
  if (typeof value === 'string' && HEADER_NAME.test(value) && !value.includes('*')) return value
  throw invalid(`${where}.idempotencyKey`, value, `true (the header ${IDEMPOTENCY_KEY_HEADER}), a header name like 'X-Request-ID', or false`)
}

/** CloudEvents' `id`, else the header other formats carry (lib/wire.ts): what a relayed message of this plugin has. */
export const DEFAULT_MESSAGE_ID_SOURCES: MessageIdSource[] = [
  { in: 'headers', path: ['id'] },
  { in: 'headers', path: ['x-message-id'] }
]

const MESSAGE_ID_SOURCE = /^(headers)\.([!#$%&'+.^_`|~0-9A-Za-z-]+)$|^(data)\.([A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*)$/

function messageIdSource(value: unknown): MessageIdSource | undefined {
  const match = typeof value === 'string' ? MESSAGE_ID_SOURCE.exec(value) : null
  if (!match) return undefined
  return match[1] ? { in: 'headers', path: [match[2]] } : { in: 'data', path: match[4].split('.') }
}

/**
 * How an inboxed messaging service deduplicates inbound messages (`inboxed: { messageId }`): by the first of the
 * named places that has a value (`'headers.<name>'`, `'data.<path>'`, or a list of them), by the default ones for
 * `inboxed: true`; `messageId: false` switches deduplication off. Undefined: the service is not inboxed.
 */
export function inboxMessageId(conf: Raw, where: string): MessageIdSource[] | false | undefined {
  const inboxed = conf.inboxed ?? conf.inbox
  if (!inboxed) return undefined
  if (inboxed === true) return DEFAULT_MESSAGE_ID_SOURCES
  const allowed = "true, or an object { messageId } whose messageId is 'headers.<name>', 'data.<path>', a list of them, or false"
  if (typeof inboxed !== 'object' || Array.isArray(inboxed)) throw invalid(`${where}.inboxed`, inboxed, allowed)
  const options = inboxed as Raw
  const unknown = Object.keys(options).filter(k => k !== 'messageId')
  if (unknown.length) throw invalid(`${where}.inboxed`, inboxed, allowed)
  const value = options.messageId ?? true
  if (value === false) return false
  if (value === true) return DEFAULT_MESSAGE_ID_SOURCES
  const list = Array.isArray(value) ? value : [value]
  const sources = list.map(messageIdSource)
  if (list.length && sources.every((s): s is MessageIdSource => !!s)) return sources
  throw invalid(`${where}.inboxed.messageId`, value, "'headers.<name>' (e.g. 'headers.x-event-id'), 'data.<path>' (e.g. 'data.event.ID'), a list of them, or false")
}
