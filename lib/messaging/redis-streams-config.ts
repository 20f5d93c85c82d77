import { describe, invalid } from '../errors'
import type { RedisStreamsSettings } from '../interfaces'
import { duration, integer, warnOnce, type Raw } from '../config/values'

/** The options of a messaging service of kind `redis-streams`. */

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
