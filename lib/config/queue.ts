import { invalid } from '../errors'
import { dataPathKey, isDataPath } from '../ordering'
import { NEVER_STORED_HEADERS, secretHeaderRule } from '../secrets'
import type { BackoffSettings, CircuitBreakerSettings, DeadLetterOrdering, HeaderRule, OrderingKeySource, QueueSettings, RateLimitSettings } from '../interfaces'
import { parseDuration } from '../time/durations'
import { duration, flag, HEADER_NAME, integer, type Raw } from './values'

/** The options of a queue, wherever they are set (`cds.requires.queue`, a named queue, a service's `outboxed`). */

/** The queue every service uses unless configured otherwise; CAP's name for it. */
export const DEFAULT_QUEUE = 'queue'

const PERSISTENT_KINDS = ['persistent-queue', 'persistent-outbox']
const KINDS = [...PERSISTENT_KINDS, 'in-memory-queue', 'in-memory-outbox']

/** 4 MiB: far above ordinary events, well below what makes a row slow to write, read and claim. */
const DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024

/** CAP's backoff curve: (1.5^attempts - 1) s, capped at 1,480 s. */
const CAP_BACKOFF: BackoffSettings = { base: 1000, factor: 1.5, max: 1_480_000, jitter: 0 }

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

/** The header names of option `key`: a list (one name is a list of one), each allowed by `isAllowed`. */
function headerNames(raw: Raw, key: string, where: string, allowed: string, isAllowed: (name: string) => boolean): string[] {
  const value = raw[key] ?? []
  const list = typeof value === 'string' ? [value] : value
  if (Array.isArray(list) && list.every(h => typeof h === 'string' && HEADER_NAME.test(h) && isAllowed(h))) return list as string[]
  throw invalid(`${where}.${key}`, value, allowed)
}

/** Headers never stored beyond the built-in rule (`secretHeaders`), and headers it would drop that are safe (`keepHeaders`). */
function secretHeader(raw: Raw, where: string): HeaderRule {
  const secret = headerNames(raw, 'secretHeaders', where, "a list of header names, '*' matching any characters, e.g. ['x-acme-token', 'x-acme-*']", () => true)
  const keep = headerNames(raw, 'keepHeaders', where, `a list of header names, other than ${NEVER_STORED_HEADERS.join(', ')}, which are never stored`, h => !NEVER_STORED_HEADERS.includes(h.toLowerCase()))
  return secretHeaderRule(secret, keep)
}

/** The shortest retention (dead letters, receipts): below it, a row would be gone before anyone could look at it. */
const MIN_RETENTION = 1000

/** A retention of option `where`: a duration of at least `MIN_RETENTION`; `allowed` says so in the error. */
function retention(value: unknown, where: string, allowed: string): number {
  let ms: number
  try {
    ms = parseDuration(value, where)
  } catch {
    throw invalid(where, value, allowed)
  }
  if (ms < MIN_RETENTION) throw invalid(where, value, allowed)
  return ms
}

/** How long a queue keeps its dead letters (ms); `false`, the default, keeps them until an operator acts: undefined. */
function deadLetterRetention(raw: Raw, where: string): number | undefined {
  const value = raw.deadLetterRetention ?? false
  if (value === false) return undefined
  return retention(value, `${where}.deadLetterRetention`, `a duration of at least ${MIN_RETENTION / 1000} s such as '30d', or false to keep dead letters`)
}

/**
 * How long receivers keep a processed message ID or an idempotency key (lib/receipts): a week outlasts a broker's
 * redeliveries and a sender's retries (10 attempts of CAP's backoff take under 2 minutes) and leaves time to revive a
 * dead letter after an incident, at one row per message (figures in docs/CONSUMER.md#storage-and-cost-of-the-receipts).
 */
const DEFAULT_RECEIPT_RETENTION = '7d'

function receiptRetention(raw: Raw, where: string): number {
  const value = raw.receiptRetention ?? DEFAULT_RECEIPT_RETENTION
  return retention(value, `${where}.receiptRetention`, `a duration of at least ${MIN_RETENTION / 1000} s such as '7d'`)
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

/** The object option `key` (undefined when not set) with exactly the keys `keys`, each given; `allowed` says what it is. */
function settingsObject(raw: Raw, key: string, where: string, keys: string[], allowed: string): Raw | undefined {
  const value = raw[key]
  if (value === undefined || value === null || value === false) return undefined
  const given = value as Raw
  const valid = typeof value === 'object' && !Array.isArray(value) && keys.every(k => given[k] !== undefined) && Object.keys(given).every(k => keys.includes(k))
  if (!valid) throw invalid(`${where}.${key}`, value, allowed)
  return given
}

function rateLimit(raw: Raw, where: string): RateLimitSettings | undefined {
  const value = settingsObject(raw, 'rateLimit', where, ['count', 'per'], "an object { count, per } like { count: 100, per: '1m' }, or false")
  if (!value) return undefined
  const at = `${where}.rateLimit`
  return { count: integer(value, 'count', at, 1, 1), per: duration(value, 'per', at, 0, 1) }
}

function circuitBreaker(raw: Raw, where: string): CircuitBreakerSettings | undefined {
  const value = settingsObject(raw, 'circuitBreaker', where, ['failures', 'probeInterval'], "an object { failures, probeInterval } like { failures: 5, probeInterval: '30s' }, or false")
  if (!value) return undefined
  const at = `${where}.circuitBreaker`
  return { failures: integer(value, 'failures', at, 1, 1), probeInterval: duration(value, 'probeInterval', at, 0, 1) }
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
    concurrency: integer(raw, 'concurrency', where, 10, 1, 1000),
    secretHeader: secretHeader(raw, where),
    rateLimit: rateLimit(raw, where),
    circuitBreaker: circuitBreaker(raw, where),
    deadLetterRetention: deadLetterRetention(raw, where),
    receiptRetention: receiptRetention(raw, where)
  }
}

/** A service's own queue setting: `outboxed`, or the legacy keys `outbox` and `queued`. */
export function queueSetting(conf: Raw | undefined): unknown {
  if (!conf) return undefined
  const values = [conf.outboxed, conf.outbox, conf.queued]
  if (values.includes(false)) return false
  return values.find(v => v !== undefined)
}
