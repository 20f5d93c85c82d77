import { describe, invalid } from './errors'
import { parseDuration } from './time/durations'
import { dataPathKey, isDataPath } from './ordering'
import { NEVER_STORED_HEADERS, secretHeaderRule } from './secrets'
import type { BackoffSettings, CircuitBreakerSettings, DeadLetterOrdering, DeliveryMode, MessageIdSource, RateLimitSettings, HeaderRule, OrderingKeySource, QueueSettings, RedisStreamsSettings, RunnerSettings, StoreChoice } from './interfaces'
import { LOG } from './log'

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

/**
 * 32 MiB: what a process holds of claimed messages at once (`maxClaimBytes`). A message costs the heap more than its
 * size while it runs (the row, the decoded message, the handler's request): with this bound a backlog of 1.5 MB
 * messages drains in a 512 MB heap (test/faults/memory.test.js), and a backlog of ordinary events (kilobytes) never
 * reaches it.
 */
const DEFAULT_MAX_CLAIM_BYTES = 32 * 1024 * 1024

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

/** A header name (RFC 9110 token characters); `*` is one of them, and a wildcard in `secretHeaders`. */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/

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

/** Options of a queue, wherever they are set. */
const QUEUE_KEYS = [
  'maxAttempts', 'timeout', 'handlerTimeout', 'maxMessageSize', 'backoff', 'storeLastError', 'maxErrorLength',
  'legacyLocking', 'timezone', 'orderingKey', 'orderingOnDeadLetter', 'concurrency', 'secretHeaders', 'keepHeaders',
  'rateLimit', 'circuitBreaker', 'deadLetterRetention', 'receiptRetention'
]
/** Options of the runner as a whole: only in `cds.requires.queue`. */
const RUNNER_KEYS = ['pollInterval', 'shutdownGrace', 'chunkSize', 'maxClaimBytes', 'batchSize', 'statisticsInterval', 'store', 'deliver']
/**
 * CAP's own keys of a queue's configuration, accepted as they are (`model`, `kind` …); no effect on this runner.
 * (CAP's `storeLastError` is a queue option here too: in QUEUE_KEYS.)
 */
const CAP_KEYS = ['kind', 'model', 'parallel', 'ignoredContext', 'impl']
/** The keys of the options that are objects, canonicalised like the options themselves. */
const NESTED_KEYS: Record<string, string[] | undefined> = {
  backoff: ['base', 'factor', 'max', 'jitter'],
  rateLimit: ['count', 'per'],
  circuitBreaker: ['failures', 'probeInterval']
}

/** Where options are set, and so which keys they may have. */
export type OptionsScope = 'runner' | 'queue' | 'service'

const warned = new Set<string>()

function warnOnce(message: string): void {
  if (warned.has(message)) return
  warned.add(message)
  LOG.warn(message)
}

/** Edit distance, for suggesting the key a typo meant. */
function distance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    let diagonal = row[0]
    row[0] = i
    for (let j = 1; j <= b.length; j++) {
      const above = row[j]
      row[j] = Math.min(row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] === b[j - 1] ? 0 : 1))
      diagonal = above
    }
  }
  return row[b.length]
}

/** Of `known`, the one `key` is most likely a typo of, if any is close enough. */
export function closest(key: string, known: string[]): string | undefined {
  const ranked = known.map(k => [k, distance(key.toLowerCase(), k.toLowerCase())] as const).sort((x, y) => x[1] - y[1])
  return ranked[0] && ranked[0][1] <= Math.max(2, Math.floor(key.length / 3)) ? ranked[0][0] : undefined
}

/**
 * `raw` with every key in its canonical spelling. Keys differing only in case are the same key: environment variables
 * (`CDS_REQUIRES_QUEUE_MAXATTEMPTS=3`) arrive in lower case and win over the other spelling. A key that is no option
 * here is named in a warning with the closest known one; a runner-wide option outside `cds.requires.queue` too.
 */
export function canonical(raw: Raw, where: string, scope: OptionsScope, known = [...QUEUE_KEYS, ...RUNNER_KEYS, ...CAP_KEYS]): Raw {
  const allowed = scope === 'runner' ? known : scope === 'queue' ? [...QUEUE_KEYS, ...CAP_KEYS] : QUEUE_KEYS
  const out: Raw = {}
  for (const [key, value] of Object.entries(raw)) {
    // CAP's internal keys (`_ignoredContext` …) are CAP's business
    if (key.startsWith('_')) continue
    const name = known.find(k => k.toLowerCase() === key.toLowerCase())
    if (!name) {
      const hint = closest(key, allowed)
      warnOnce(`Unknown option ${where}.${key}: ignored.${hint ? ` Did you mean '${hint}'?` : ''} Known options: ${allowed.join(', ')}.`)
      continue
    }
    if (!allowed.includes(name)) {
      warnOnce(`Option ${where}.${key} has no effect here: ${RUNNER_KEYS.includes(name) ? 'it applies to the runner as a whole; set it in cds.requires.queue' : 'it is not an option of a queue'}.`)
      continue
    }
    // the spelling of the environment (lower case) wins over the configured one
    if (!(name in out) || key !== name) {
      const nested = NESTED_KEYS[name]
      out[name] = nested && value && typeof value === 'object' && !Array.isArray(value) ? canonical(value as Raw, `${where}.${name}`, 'runner', nested) : value
    }
  }
  return out
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

export const STORE_CHOICES: StoreChoice[] = ['auto', 'native', 'portable']

function storeChoice(raw: Raw, where: string): StoreChoice {
  const value = raw.store ?? 'auto'
  if (STORE_CHOICES.includes(value as StoreChoice)) return value as StoreChoice
  throw invalid(`${where}.store`, value, STORE_CHOICES.map(v => `'${v}'`).join(', ').replace(/, ([^,]*)$/, ' or $1'))
}

const DELIVERY_MODES: DeliveryMode[] = ['once', 'twice']

function deliveryMode(raw: Raw, where: string): DeliveryMode {
  const value = raw.deliver ?? 'once'
  if (DELIVERY_MODES.includes(value as DeliveryMode)) return value as DeliveryMode
  throw invalid(`${where}.deliver`, value, `'once', or 'twice' in tests (every message delivered a second time)`)
}

export function compileRunner(raw: Raw): RunnerSettings {
  const where = 'cds.requires.queue'
  return {
    pollInterval: duration(raw, 'pollInterval', where, '5s', 1),
    shutdownGrace: duration(raw, 'shutdownGrace', where, '10s'),
    concurrency: integer(raw, 'concurrency', where, 10, 1, 1000),
    chunkSize: integer(raw, 'chunkSize', where, 500, 1, 10000),
    maxClaimBytes: integer(raw, 'maxClaimBytes', where, DEFAULT_MAX_CLAIM_BYTES, 1024),
    batchSize: integer(raw, 'batchSize', where, 50, 1, 1000),
    statisticsInterval: duration(raw, 'statisticsInterval', where, '30s', 1000),
    store: storeChoice(raw, where),
    deliver: deliveryMode(raw, where)
  }
}

/** A service's own queue setting: `outboxed`, or the legacy keys `outbox` and `queued`. */
export function queueSetting(conf: Raw | undefined): unknown {
  if (!conf) return undefined
  const values = [conf.outboxed, conf.outbox, conf.queued]
  if (values.includes(false)) return false
  return values.find(v => v !== undefined)
}


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

/** Where Redis is when no credentials are configured: the redis client's default, as in CAP's Redis adapter. */
const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379'
/** About 50 MB of 500-byte events per stream: room for a consumer outage of hours at hundreds of events a second. */
const DEFAULT_STREAM_LENGTH = 100_000
const REDIS_STREAMS_KEYS = ['group', 'consumer', 'maxLength', 'maxAge', 'claimAfter', 'commandTimeout']

/** The broker's own options of a messaging service's configuration, by canonical name (any case, as env variables give them). */
function ownOptions(raw: Raw, keys: string[]): Raw {
  const own: Raw = {}
  for (const [key, value] of Object.entries(raw)) {
    const name = keys.find(k => k.toLowerCase() === key.toLowerCase())
    if (name && (!(name in own) || key !== name)) own[name] = value
  }
  return own
}

/**
 * The Redis URL of a messaging service's credentials. `credentials.uri` is read as CAP's `redis-messaging` reads it:
 * its user name is ignored and the password authenticates Redis's default user (SAP BTP's `redis-cache` binding puts
 * the placeholder `no-user-name-for-redis` there; a Redis that requires a password refuses that name). The plugin's
 * own `credentials.url` is taken as written, for a Redis ACL user. A Redis cluster (`cluster_mode`) is refused.
 */
function redisUrl(raw: Raw, where: string): string {
  const credentials = raw.credentials ?? {}
  if (typeof credentials !== 'object' || credentials === null) throw invalid(`${where}.credentials`, credentials, 'an object with uri or url')
  const { uri, url, cluster_mode: clusterMode } = credentials as Raw
  if (clusterMode === true || clusterMode === 'true') {
    throw invalid(`${where}.credentials.cluster_mode`, clusterMode, 'false: redis-streams connects to one Redis node and reads all streams of a service in one XREADGROUP, which a cluster refuses across hash slots; bind a redis-cache instance without cluster mode')
  }
  const value = uri ?? url
  if (value === undefined) {
    warnOnce(`${where} has no credentials.uri: connecting to ${DEFAULT_REDIS_URL}.`)
    return DEFAULT_REDIS_URL
  }
  if (typeof value === 'string' && /^rediss?:\/\/[^/]/.test(value)) return uri === undefined ? value : withoutUserName(value)
  // The value may carry a password: shown masked.
  const shown = typeof value === 'string' ? value.replace(/\/\/[^@/]*@/, '//***@') : value
  throw invalid(`${where}.credentials.${uri === undefined ? 'url' : 'uri'}`, shown, "a Redis URL like 'redis://host:6379' or 'rediss://user:password@host:6380'")
}

function withoutUserName(url: string): string {
  const parsed = new URL(url)
  if (!parsed.username) return url
  parsed.username = ''
  return parsed.href
}

function name(raw: Raw, key: string, where: string, fallback: string): string {
  const value = raw[key] ?? fallback
  if (typeof value === 'string' && value.length > 0 && value.length <= 255) return value
  throw invalid(`${where}.${key}`, value, 'a non-empty string of at most 255 characters')
}

function streamTrim(raw: Raw, where: string): RedisStreamsSettings['trim'] {
  if (raw.maxAge === undefined) return { maxLength: integer(raw, 'maxLength', where, DEFAULT_STREAM_LENGTH, 1) }
  if (raw.maxLength !== undefined) throw invalid(`${where}.maxAge`, raw.maxAge, `no maxAge beside maxLength (${describe(raw.maxLength)}): a stream is bounded by one of them`)
  return { maxAge: duration(raw, 'maxAge', where, 0, 1000) }
}

/**
 * Compiles the options of a messaging service of kind `redis-streams`; `defaults` are this app's group and this
 * process's consumer name. CAP's own messaging options (`format`, `publishPrefix` …) are CAP's business.
 */
export function compileRedisStreams(raw: Raw, where: string, defaults: { group: string; consumer: string }): RedisStreamsSettings {
  const own = ownOptions(raw, REDIS_STREAMS_KEYS)
  const url = redisUrl(raw, where)
  const { host, port } = new URL(url)
  return {
    url,
    endpoint: `${host}${port ? '' : ':6379'}`,
    group: name(own, 'group', where, defaults.group),
    consumer: name(own, 'consumer', where, defaults.consumer),
    trim: streamTrim(own, where),
    claimAfter: duration(own, 'claimAfter', where, '1m', 100),
    commandTimeout: duration(own, 'commandTimeout', where, '5s', 100)
  }
}
