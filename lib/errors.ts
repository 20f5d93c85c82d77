import { types } from 'util'

/**
 * The one way the plugin reports bad input: every message names what was wrong (an option or an argument),
 * the value received and what is allowed, so configuration and API errors read the same everywhere.
 */
export class QueueError extends Error {
  readonly code: string

  constructor(message: string, code = 'EVENT_QUEUE_ERROR') {
    super(message)
    this.name = 'QueueError'
    this.code = code
  }
}

export function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value)
  if (typeof value === 'bigint') return `${value}n`
  if (typeof value === 'function') return `function ${value.name || '(anonymous)'}`
  if (typeof value === 'number' || typeof value === 'boolean' || value == null) return String(value)
  try {
    return JSON.stringify(value)
  } catch {
    return Object.prototype.toString.call(value)
  }
}

/** `what` is invalid: got `value`, allowed is `allowed`. */
export function invalid(what: string, value: unknown, allowed: string): QueueError {
  return new QueueError(`Invalid ${what}: ${describe(value)}. Expected ${allowed}.`, 'INVALID_QUEUE_INPUT')
}

/**
 * Whether `error` is an error, also one of another realm: under jest a driver's error class (better-sqlite3's
 * SqliteError) extends a realm's `Error` that the plugin's code does not see, so `instanceof` fails and util.inspect
 * prints it without message and stack.
 */
export function isError(error: unknown): error is Error {
  if (error instanceof Error || types.isNativeError(error)) return true
  const e = error as { message?: unknown; stack?: unknown } | null
  return !!e && typeof e === 'object' && typeof e.message === 'string' && typeof e.stack === 'string'
}
