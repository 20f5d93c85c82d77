import { invalid } from './errors'
import { parseDuration } from './time/durations'
import { dataPathKey, isDataPath } from './ordering'
import type { BackoffSettings, DeadLetterOrdering, OrderingKeySource, QueueSettings, RunnerSettings } from './interfaces'

/**
 * Queue and runner options, from their raw configuration values to validated settings. Every value is checked here,
 * so a typo fails the start with an error naming the option, the value and what is allowed.
 */

/** The queue every service uses unless configured otherwise; CAP's name for it. */
export const DEFAULT_QUEUE = 'queue'

export type Raw = Record<string, unknown>

const PERSISTENT_KINDS = ['persistent-queue', 'persistent-outbox']
const KINDS = [...PERSISTENT_KINDS, 'in-memory-queue', 'in-memory-outbox']

/** 4 MiB: far above ordinary events, well below what makes a row slow to write, read and claim. */
const DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024

/** CAP's backoff curve: (1.5^attempts - 1) s, capped at 1,480 s. */
const CAP_BACKOFF: BackoffSettings = { base: 1000, factor: 1.5, max: 1_480_000, jitter: 0 }

function integer(raw: Raw, key: string, where: string, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const value = raw[key] ?? fallback
  if (typeof value === 'number' && Number.isInteger(value) && value >= min && value <= max) return value
  const range = max === Number.MAX_SAFE_INTEGER ? `an integer >= ${min}` : `an integer from ${min} to ${max}`
  throw invalid(`${where}.${key}`, value, range)
}

function duration(raw: Raw, key: string, where: string, fallback: number | string, min = 0): number {
  const ms = parseDuration(raw[key] ?? fallback, `${where}.${key}`)
  if (ms < min) throw invalid(`${where}.${key}`, raw[key], `a duration of at least ${min} ms`)
  return ms
}

function flag(raw: Raw, key: string, where: string, fallback: boolean): boolean {
  const value = raw[key] ?? fallback
  if (typeof value === 'boolean') return value
  throw invalid(`${where}.${key}`, value, 'true or false')
}

/** The canonical name of an IANA time zone the runtime knows (Intl resolves zones as cron-parser does), else undefined. */
function knownTimeZone(name: string): string | undefined {
  try {
    return Intl.DateTimeFormat('en-US', { timeZone: name }).resolvedOptions().timeZone
  } catch {
    return undefined
  }
}

function timezone(raw: Raw, where: string): string | undefined {
  const value = raw.timezone
  if (value === undefined) return undefined
  const zone = typeof value === 'string' ? knownTimeZone(value) : undefined
  if (!zone) throw invalid(`${where}.timezone`, value, "an IANA time zone name like 'UTC' or 'Europe/Berlin'")
  return zone
}

/** A data path into `req.data` (configuration) or a function of the request (`cds.queued(srv, { orderingKey })`). */
function orderingKey(raw: Raw, where: string): OrderingKeySource | undefined {
  const value = raw.orderingKey
  if (value === undefined || value === null) return undefined
  if (typeof value === 'function') return value as OrderingKeySource
  if (isDataPath(value)) return dataPathKey(value)
  throw invalid(`${where}.orderingKey`, value, "a path into the event's data like 'ID' or 'order.ID', or a function req => key")
}

const DEAD_LETTER_ORDERING: DeadLetterOrdering[] = ['continue', 'block']

function orderingOnDeadLetter(raw: Raw, where: string): DeadLetterOrdering {
  const value = raw.orderingOnDeadLetter ?? 'continue'
  if (DEAD_LETTER_ORDERING.includes(value as DeadLetterOrdering)) return value as DeadLetterOrdering
  throw invalid(`${where}.orderingOnDeadLetter`, value, DEAD_LETTER_ORDERING.map(v => `'${v}'`).join(' or '))
}

function backoff(raw: Raw, where: string): BackoffSettings {
  const value = raw.backoff ?? {}
  if (typeof value !== 'object' || value === null) {
    throw invalid(`${where}.backoff`, value, 'an object with base, factor, max and jitter')
  }
  const b = value as Raw
  const at = `${where}.backoff`
  const factor = b.factor ?? CAP_BACKOFF.factor
  if (typeof factor !== 'number' || !Number.isFinite(factor) || factor < 1) throw invalid(`${at}.factor`, factor, 'a number >= 1')
  const jitter = b.jitter ?? CAP_BACKOFF.jitter
  if (typeof jitter !== 'number' || !(jitter >= 0 && jitter <= 1)) throw invalid(`${at}.jitter`, jitter, 'a number from 0 to 1')
  return {
    base: duration(b, 'base', at, CAP_BACKOFF.base),
    factor,
    max: duration(b, 'max', at, CAP_BACKOFF.max),
    jitter
  }
}

/** `cds.requires.queue: false` (or an in-memory kind) keeps queued calls in memory until commit, as CAP does. */
function isPersistent(raw: Raw): boolean {
  return raw.kind === undefined || PERSISTENT_KINDS.includes(raw.kind as string)
}

/** Compiles and validates the options of queue `name`; `where` names the configuration path in error messages. */
export function compileQueue(name: string, raw: Raw, where: string): QueueSettings {
  if (raw.kind !== undefined && !KINDS.includes(raw.kind as string)) throw invalid(`${where}.kind`, raw.kind, KINDS.join(', '))
  return {
    name,
    persistent: isPersistent(raw),
    maxAttempts: integer(raw, 'maxAttempts', where, 10, 1),
    timeout: duration(raw, 'timeout', where, '1h', 1),
    handlerTimeout: duration(raw, 'handlerTimeout', where, '1h', 1),
    maxMessageSize: integer(raw, 'maxMessageSize', where, DEFAULT_MAX_MESSAGE_SIZE, 1024),
    backoff: backoff(raw, where),
    storeLastError: flag(raw, 'storeLastError', where, true),
    maxErrorLength: integer(raw, 'maxErrorLength', where, 4000, 100),
    legacyLocking: flag(raw, 'legacyLocking', where, false),
    timezone: timezone(raw, where),
    orderingKey: orderingKey(raw, where),
    orderingOnDeadLetter: orderingOnDeadLetter(raw, where),
    // The default queue's options come from cds.requires.queue, where `concurrency` is the runner-wide limit too.
    concurrency: integer(raw, 'concurrency', where, 10, 1, 1000)
  }
}

export function compileRunner(raw: Raw): RunnerSettings {
  const where = 'cds.requires.queue'
  return {
    pollInterval: duration(raw, 'pollInterval', where, '5s', 1),
    shutdownGrace: duration(raw, 'shutdownGrace', where, '10s'),
    concurrency: integer(raw, 'concurrency', where, 10, 1, 1000),
    chunkSize: integer(raw, 'chunkSize', where, 500, 1, 10000),
    batchSize: integer(raw, 'batchSize', where, 50, 1, 1000)
  }
}

/** A service's own queue setting: `outboxed`, or the legacy keys `outbox` and `queued`. */
export function queueSetting(conf: Raw | undefined): unknown {
  if (!conf) return undefined
  const values = [conf.outboxed, conf.outbox, conf.queued]
  if (values.includes(false)) return false
  return values.find(v => v !== undefined)
}

