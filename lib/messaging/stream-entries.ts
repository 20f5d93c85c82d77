import type { BrokerMessage } from '../cap/messaging'
import type { RedisStreamsSettings } from '../interfaces'

/**
 * A message as a stream entry and back, and the replies of the stream commands read into plain objects.
 *
 * An entry has the field `message`, the JSON CAP's Redis adapter publishes (`{ data, ...headers }`, with
 * `format: 'cloudevents'` a structured CloudEvent), and `tenant` where the message has one, as CAP's Kafka adapter
 * carries it in a header of its own.
 */

/** An entry as a read returns it; `fields` is null for an entry deleted from the stream before it was read (trimmed). */
export interface StreamEntry {
  stream: string
  id: string
  fields: Record<string, string> | null
}

/** The fields of the entry for `message`, sent in `tenant`. */
export function entryFields(message: BrokerMessage, tenant: string | undefined): string[] {
  const fields = ['message', JSON.stringify({ data: message.data, ...message.headers })]
  if (tenant) fields.push('tenant', tenant)
  return fields
}

/** The message an entry of `stream` carries (the stream's name is its topic) and its tenant; throws for malformed entries. */
export function entryMessage(entry: StreamEntry & { fields: Record<string, string> }): { message: BrokerMessage; tenant?: string } {
  const payload: unknown = JSON.parse(entry.fields.message ?? '')
  if (!payload || typeof payload !== 'object' || Array.isArray(payload)) throw new Error('the field "message" is no JSON object')
  const { data, ...headers } = payload as Record<string, unknown>
  return { message: { event: entry.stream, data, headers }, tenant: entry.fields.tenant }
}

/** The arguments of XADD after the key: the stream's bound (approximate trimming, which Redis does in whole nodes), then the entry. */
export function xaddArguments(trim: RedisStreamsSettings['trim'], fields: string[], now = Date.now()): string[] {
  const bound = 'maxLength' in trim ? ['MAXLEN', '~', String(trim.maxLength)] : ['MINID', '~', `${now - trim.maxAge}-0`]
  return [...bound, '*', ...fields]
}

type RawEntry = [string, string[] | null]

function fieldsOf(raw: string[] | null): Record<string, string> | null {
  if (!raw) return null
  const fields: Record<string, string> = {}
  for (let i = 0; i + 1 < raw.length; i += 2) fields[raw[i]] = raw[i + 1]
  return fields
}

/**
 * XREADGROUP's reply (null when the block timed out), as entries in stream order: RESP2 gives an array of
 * `[stream, entries]`, RESP3 (node-redis 6's default) a map of stream to entries.
 */
export function readReply(reply: unknown): StreamEntry[] {
  if (!reply || typeof reply !== 'object') return []
  const streams = Array.isArray(reply) ? (reply as [string, RawEntry[]][]) : reply instanceof Map ? [...reply] : Object.entries(reply)
  return (streams as [string, RawEntry[]][]).flatMap(([stream, entries]) => entries.map(([id, raw]) => ({ stream, id, fields: fieldsOf(raw) })))
}

/** XAUTOCLAIM … JUSTID's reply: the cursor to go on from ('0-0' when done), the IDs now this consumer's, the IDs deleted meanwhile. */
export function claimReply(reply: unknown): { cursor: string; claimed: string[]; deleted: string[] } {
  const [cursor, claimed, deleted] = reply as [string, string[], string[] | undefined]
  return { cursor, claimed, deleted: deleted ?? [] }
}

/** A reply of key-value pairs as an object: RESP2 gives a flat array, RESP3 a map. */
function pairs(reply: unknown): Record<string, unknown> {
  if (reply instanceof Map) return Object.fromEntries(reply)
  if (!Array.isArray(reply)) return (reply ?? {}) as Record<string, unknown>
  const fields: Record<string, unknown> = {}
  for (let i = 0; i + 1 < reply.length; i += 2) fields[String(reply[i])] = reply[i + 1]
  return fields
}

/**
 * XINFO GROUPS's `lag` of `group`: the entries added to the stream since the group was created that it has not read,
 * trimmed ones included (Redis 7; undefined before, or when Redis cannot tell, e.g. after XDEL).
 */
export function groupLag(reply: unknown, group: string): number | undefined {
  const info = (Array.isArray(reply) ? reply : []).map(pairs).find(g => String(g.name) === group)
  const lag = info?.lag
  return lag === null || lag === undefined ? undefined : Number(lag)
}
