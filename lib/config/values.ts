import { invalid } from '../errors'
import { LOG } from '../log'
import { parseDuration } from '../time/durations'

/**
 * The raw values every scope of the options reads (queue.ts, runner.ts, receivers.ts, keys.ts,
 * lib/messaging/redis-streams-config.ts): each is checked, so a typo fails the start with an error naming the option,
 * the value and what is allowed.
 */

export type Raw = Record<string, unknown>

export function integer(raw: Raw, key: string, where: string, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const value = raw[key] ?? fallback
  if (typeof value === 'number' && Number.isInteger(value) && value >= min && value <= max) return value
  const range = max === Number.MAX_SAFE_INTEGER ? `an integer >= ${min}` : `an integer from ${min} to ${max}`
  throw invalid(`${where}.${key}`, value, range)
}

export function duration(raw: Raw, key: string, where: string, fallback: number | string, min = 0): number {
  const ms = parseDuration(raw[key] ?? fallback, `${where}.${key}`)
  if (ms < min) throw invalid(`${where}.${key}`, raw[key], `a duration of at least ${min} ms`)
  return ms
}

export function flag(raw: Raw, key: string, where: string, fallback: boolean): boolean {
  const value = raw[key] ?? fallback
  if (typeof value === 'boolean') return value
  throw invalid(`${where}.${key}`, value, 'true or false')
}

/** A header name (RFC 9110 token characters); `*` is one of them, and a wildcard in `secretHeaders`. */
export const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/

const warned = new Set<string>()

export function warnOnce(message: string): void {
  if (warned.has(message)) return
  warned.add(message)
  LOG.warn(message)
}
