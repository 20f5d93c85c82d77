import { inspect } from 'util'
import { isError } from './errors'
import { maskedErrorData, maskSecrets } from './secrets'

/** Stack frames kept in `lastError`: where it failed, not the whole way there. */
const STACK_FRAMES = 10

/**
 * A stack frame without the server's file system: paths inside the app (or its node_modules) relative to it,
 * other absolute paths cut to their file name.
 */
function withoutServerPaths(frame: string, root: string): string {
  return frame.replace(/(\(|\s)(\/[^():\s]+|[A-Za-z]:\\[^():]+)/g, (_m, before: string, path: string) => {
    const inApp = root && path.startsWith(root) ? path.slice(root.length).replace(/^[\\/]/, '') : undefined
    return before + (inApp ?? path.split(/[\\/]/).pop())
  })
}

/** An error's first line: name, message and code. */
export function errorLine(error: unknown): string {
  if (!isError(error)) return typeof error === 'string' ? error : inspect(error, { depth: 1, breakLength: Infinity })
  const e = error as Error & { code?: unknown; statusCode?: unknown; status?: unknown }
  const code = e.code ?? e.statusCode ?? e.status
  return `${e.name}: ${e.message}${code !== undefined ? ` (code ${String(code)})` : ''}`
}

/**
 * The text kept in `lastError`: name, message, code and the first stack frames (paths relative to the app), never
 * the error's other properties (an HTTP client error carries its whole request configuration, credentials
 * included), with credentials masked and cut to size.
 */
export function storedError(error: unknown, maxLength: number, root = process.cwd()): string {
  let text = errorLine(error)
  if (isError(error) && error.stack) {
    const frames = error.stack.split('\n').filter(line => /^\s+at /.test(line)).slice(0, STACK_FRAMES)
    if (frames.length) text += '\n' + frames.map(f => withoutServerPaths(f, root)).join('\n')
  }
  const masked = maskSecrets(text)
  return masked.length > maxLength ? masked.slice(0, maxLength - 1) + '…' : masked
}

/**
 * The error as `#failed` handlers receive it: name, message, code and its own plain properties, credentials masked
 * (it is stored in the callback's row, which operators read).
 */
export function errorData(error: unknown): Record<string, unknown> {
  if (!(error instanceof Error)) return { message: maskSecrets(typeof error === 'string' ? error : inspect(error)) }
  return maskedErrorData(error)
}

const PROGRAMMING_ERRORS = new Set(['TypeError', 'ReferenceError', 'SyntaxError', 'RangeError', 'URIError', 'EvalError'])

/** A bug in the handler: retrying cannot help, so the message is dead-lettered at once (and the process lives on). */
export function isProgrammingError(error: unknown): boolean {
  return error instanceof Error && PROGRAMMING_ERRORS.has(error.name) && error.constructor.name !== 'peg$SyntaxError'
}

/** CAP's documented way for a handler to say "never retry this". */
export function isUnrecoverable(error: unknown): boolean {
  return !!(error && typeof error === 'object' && (error as { unrecoverable?: unknown }).unrecoverable)
}

/** The HTTP statuses whose `Retry-After` says when the remote system takes requests again. */
const RETRY_AFTER_STATUSES = [429, 503]

/** When the remote system takes requests again: `delay` ms after the attempt, or at the instant `at` (epoch ms). */
export type RetryAfter = { delay: number; at?: undefined } | { at: number; delay?: undefined }

/** A `Retry-After` value (delta-seconds or an HTTP date, RFC 9110 §10.2.3), a number of seconds, or a Date. */
function parseRetryAfter(value: unknown): RetryAfter | undefined {
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? undefined : { at: value.getTime() }
  if (typeof value === 'number') return Number.isFinite(value) && value >= 0 ? { delay: value * 1000 } : undefined
  if (typeof value !== 'string' || value.trim() === '') return undefined
  if (/^\s*\d+\s*$/.test(value)) return { delay: Number(value) * 1000 }
  const at = Date.parse(value)
  return Number.isNaN(at) ? undefined : { at }
}

interface HttpResponse {
  status?: unknown
  headers?: Record<string, unknown> & { get?: (name: string) => unknown }
}

/** The response of a failed HTTP call: the error's own, or (CAP's remote services wrap it as a 502) its `reason`'s. */
function responseOf(error: object): HttpResponse | undefined {
  const e = error as { response?: HttpResponse; reason?: { response?: HttpResponse } }
  return e.response ?? e.reason?.response
}

/**
 * When the remote system asked the next attempt to come: the error's `retryAfter` (seconds, an HTTP `Retry-After`
 * value or a Date), else the `Retry-After` header of an HTTP 429 or 503 response it carries. Undefined when it asked
 * nothing: the queue's backoff applies.
 */
export function retryAfter(error: unknown): RetryAfter | undefined {
  if (!error || typeof error !== 'object') return undefined
  const own = parseRetryAfter((error as { retryAfter?: unknown }).retryAfter)
  if (own) return own
  const response = responseOf(error)
  if (!response || !RETRY_AFTER_STATUSES.includes(Number(response.status))) return undefined
  const headers = response.headers
  return parseRetryAfter(typeof headers?.get === 'function' ? headers.get('retry-after') : (headers?.['retry-after'] ?? headers?.['Retry-After']))
}
