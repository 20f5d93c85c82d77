import { fitsNameColumn, NAME_RULE } from './codec'
import { invalid } from './errors'
import type { OrderingKeySource } from './interfaces'

/**
 * Ordering keys: which key a queued message gets. Messages with the same key run one at a time in enqueue order;
 * the claim enforces it (lib/store). A key comes from the call's `x-ordering-key` header, else from the queue's
 * `orderingKey` option (a path into `req.data`, or a function).
 */

/** The header that sets a message's ordering key per call; it wins over the queue's `orderingKey` option. */
const ORDERING_HEADER = 'x-ordering-key'

const PATH = /^[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*$/

/** Whether `value` is a data path like `'ID'` or `'order.ID'`. */
export function isDataPath(value: unknown): value is string {
  return typeof value === 'string' && PATH.test(value)
}

/** A key source reading the data path `path` (e.g. `'order.ID'`) from `req.data`. */
export function dataPathKey(path: string): OrderingKeySource {
  const steps = path.split('.')
  return req => steps.reduce<unknown>((value, step) => (value && typeof value === 'object' ? (value as Record<string, unknown>)[step] : undefined), req.data)
}

function headerValue(headers: Record<string, unknown> | undefined): unknown {
  if (!headers || typeof headers !== 'object') return undefined
  if (ORDERING_HEADER in headers) return headers[ORDERING_HEADER]
  const name = Object.keys(headers).find(h => h.toLowerCase() === ORDERING_HEADER)
  return name === undefined ? undefined : headers[name]
}

/**
 * The ordering key of a request about to be queued, or undefined for an unordered message. Numbers become strings,
 * so `4711` and `'4711'` are the same key; anything else that is not a short string is refused at the call.
 */
export function orderingKeyOf(
  req: { event?: string; data?: unknown; headers?: Record<string, unknown> },
  source: OrderingKeySource | undefined
): string | undefined {
  const fromHeader = headerValue(req.headers)
  const value = fromHeader ?? source?.(req)
  if (value === undefined || value === null) return undefined
  const key = typeof value === 'number' && Number.isFinite(value) ? String(value) : value
  if (typeof key === 'string' && key.length > 0 && fitsNameColumn(key)) return key
  const what = fromHeader !== undefined ? `header ${ORDERING_HEADER}` : 'ordering key (option orderingKey)'
  throw invalid(`${what} of event ${JSON.stringify(req.event)}`, value, `a non-empty string of ${NAME_RULE}, or a number`)
}
