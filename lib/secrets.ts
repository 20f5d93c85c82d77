import { inspect } from 'util'
import { isError } from './errors'
import type { HeaderRule } from './interfaces'

/**
 * What counts as a credential, in one place. Everything the plugin persists or logs that could carry one goes through
 * here: the headers of a queued call (codec.ts), `lastError` and the `#failed` callback's data (failures.ts), and
 * every log line (log.ts). Masking errs on the side of hiding a word too many.
 */

/** A credential shown in place of one. */
const MASK = '***'

/**
 * Names (of headers, properties, parameters) that carry credentials: they end in one of these words, whatever the
 * case and separators (`x-api-key`, `X-API-Key`, `apiKey`, `client_secret`, `x-forwarded-access-token`). A name that
 * merely contains one (`tokenUrl`, `x-ordering-key`, `idempotency-key`) is no credential.
 */
const SECRET_NAME_ENDS = [
  'authorization', 'auth', 'cookie', 'token', 'secret', 'password', 'passwd', 'pwd', 'passphrase', 'credentials?',
  'session', 'session[-_.]?id', 'signature', 'sig', 'jwt', 'csrf', 'xsrf',
  '(?:api|access|private|secret|account|subscription|functions|master|signing|client|auth|encryption|shared)[-_.]?key'
].join('|')

const SECRET_NAME = new RegExp(`(?:${SECRET_NAME_ENDS})$`, 'i')

/** Whether a header, property or parameter of this name carries a credential. */
export function isSecretName(name: string): boolean {
  return SECRET_NAME.test(name)
}

/**
 * Headers that carry credentials by definition (CAP's and the approuter's): never stored, whatever `keepHeaders` says.
 */
export const NEVER_STORED_HEADERS = ['authorization', 'proxy-authorization', 'cookie', 'set-cookie', 'x-approuter-authorization', 'x-csrf-token']

/** A header name pattern of `secretHeaders`: case-insensitive, `*` for any characters. */
function namePattern(pattern: string): RegExp {
  const escaped = pattern.split('*').map(part => part.replace(/[.+?^${}()|[\]\\-]/g, '\\$&'))
  return new RegExp(`^${escaped.join('.*')}$`, 'i')
}

/**
 * Which headers of a queued call are never stored: those named like a credential (`isSecretName`), those matching the
 * queue's `secretHeaders`, and those whose value is or contains a credential (a header is stored as it is or not at
 * all, never altered) — except the queue's `keepHeaders`, which an app declares safe.
 */
export function secretHeaderRule(secretHeaders: string[], keepHeaders: string[]): HeaderRule {
  const extra = secretHeaders.map(namePattern)
  const keep = new Set(keepHeaders.map(h => h.toLowerCase()))
  return (name, value) => {
    const lower = name.toLowerCase()
    if (NEVER_STORED_HEADERS.includes(lower)) return true
    if (keep.has(lower)) return false
    if (isSecretName(name) || extra.some(p => p.test(name))) return true
    const text = typeof value === 'string' ? value : JSON.stringify(value) ?? ''
    return maskSecrets(text) !== text
  }
}

/** A private key in PEM form, to its end (or the end of the text, if it was cut). */
const PEM = /-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----[\s\S]*?(?:-----END \1PRIVATE KEY-----|$)/g

/**
 * The userinfo of a URL: `scheme://user:password@` keeps the user, `scheme://token@` is all credential. Like every
 * pattern here it starts only where a word starts, so its cost stays linear in the text's length.
 */
const URL_USERINFO = /(?<![a-z0-9+.-])([a-z][a-z0-9+.-]*:\/\/)([^\s/?#@:'"]+)(?::[^\s/?#'"]*)?@/gi

/** A cookie header's value runs to the end of its line: every cookie in it may be a session. */
const COOKIE_PAIR = /((?<![\w.-])(\\?["']?)(?:set-)?cookie\2\s*[:=]\s*)(?:"[^"]*"|'[^']*'|[^\r\n"']+)/gi

/**
 * `name: value`, `name=value`, `"name":"value"` (also JSON inside a JSON string) for a credential's name; the value
 * quoted, an authorization scheme with its token, or up to the next separator.
 */
const SECRET_PAIR = new RegExp(
  `((?<![\\w.-])(\\\\?["']?)[\\w.-]*?(?:${SECRET_NAME_ENDS})\\2\\s*(?:=|:(?!//))\\s*)` +
    `(\\\\"(?:[^"\\\\]|\\\\[^"])*\\\\"|"(?:[^"\\\\]|\\\\.)*"|'(?:[^'\\\\]|\\\\.)*'|(?:(?:Bearer|Basic|Digest|Negotiate)\\s+)?[^\\s,;&'"<>(){}\\[\\]]+)`,
  'gi'
)

/** An authorization scheme and its token; "token" only if it looks like one (a digit or symbol in it), not a word. */
const SCHEME_TOKEN = /\b(Bearer|Basic|Digest|Negotiate|Token)\s+(?=[A-Za-z0-9._~+/-]*[0-9._~+/=-])[A-Za-z0-9._~+/=-]{6,}/gi

/** A bare JWT: header and payload are base64url JSON. */
const JWT = /\beyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*/g

/** The masked form of a quoted value keeps its quotes, so masked JSON stays JSON. */
function maskedValue(value: string): string {
  if (value.startsWith('\\"')) return `\\"${MASK}\\"`
  return /^["']/.test(value) ? value[0] + MASK + value[0] : MASK
}

/** `text` with every credential in it masked: private keys, URL passwords, secret-named values, tokens. */
export function maskSecrets(text: string): string {
  return text
    .replace(PEM, (_m, kind: string) => `-----BEGIN ${kind}PRIVATE KEY-----${MASK}-----END ${kind}PRIVATE KEY-----`)
    .replace(URL_USERINFO, (m, scheme: string, user: string) => (m.slice(scheme.length).includes(':') ? `${scheme}${user}:${MASK}@` : `${scheme}${MASK}@`))
    .replace(COOKIE_PAIR, (_m, key: string) => key + MASK)
    .replace(SECRET_PAIR, (_m, key: string, _q: string, value: string) => key + maskedValue(value))
    .replace(SCHEME_TOKEN, (_m, scheme: string) => `${scheme} ${MASK}`)
    .replace(JWT, MASK)
}

/** How deep the properties of a logged error are masked; below, they are left out. */
const MAX_DEPTH = 4

/**
 * The own enumerable data properties of `value`. Getters are left out: reading one may throw (or do anything), and
 * nothing that prints or stores an error may fail because of it.
 */
function ownData(value: object): [string, unknown][] {
  return Object.entries(Object.getOwnPropertyDescriptors(value))
    .filter(([, d]) => d.enumerable && 'value' in d)
    .map(([key, d]) => [key, d.value as unknown])
}

/** `value` of property `key` with credentials masked: secret-named values as a whole, strings by their content. */
function maskedProperty(key: string, value: unknown, depth: number, seen: Set<object>): unknown {
  if (isSecretName(key) && value !== undefined && value !== null && value !== '') return MASK
  if (typeof value === 'string') return maskSecrets(value)
  if (!value || typeof value !== 'object') return value
  if (seen.has(value) || depth >= MAX_DEPTH) return '[…]'
  if (isError(value)) return maskedError(value, depth + 1, seen)
  seen.add(value)
  if (Array.isArray(value)) return value.map((v, i) => maskedProperty(String(i), v, depth + 1, seen))
  return Object.fromEntries(ownData(value).map(([k, v]) => [k, maskedProperty(k, v, depth + 1, seen)]))
}

/** Name, message and code of an error and its own plain properties, masked: the `#failed` callback's data. */
export function maskedErrorData(error: Error): Record<string, unknown> {
  const own: Record<string, unknown> = {}
  for (const [key, value] of ownData(error)) {
    if (value === null || ['string', 'number', 'boolean'].includes(typeof value)) own[key] = maskedProperty(key, value, 0, new Set())
  }
  const e = error as Error & { code?: unknown }
  const code = typeof e.code === 'string' ? maskSecrets(e.code) : e.code
  return { ...own, name: e.name, message: maskSecrets(e.message), code }
}

/**
 * A copy of `error` to log: the same class, message and stack masked, own properties (and `cause`) masked as deep
 * as `MAX_DEPTH`. Loggers print it like the original.
 */
function maskedError(error: Error, depth = 0, seen = new Set<object>()): Error {
  seen.add(error)
  // A native error with the original's prototype: util.inspect prints an error by its stack only when it is one (or of
  // its own realm's Error), and a driver's error class may be neither (under jest, better-sqlite3's SqliteError).
  const copy = Object.setPrototypeOf(new Error(), Object.getPrototypeOf(error) as object) as Error & Record<string, unknown>
  const define = (key: string, value: unknown): void => void Object.defineProperty(copy, key, { value, writable: true, configurable: true, enumerable: false })
  define('message', maskSecrets(error.message))
  define('stack', maskSecrets(error.stack ?? `${error.name}: ${error.message}`))
  if ('cause' in error) define('cause', maskedProperty('cause', error.cause, depth, seen))
  for (const [key, value] of ownData(error)) if (key !== 'cause') copy[key] = maskedProperty(key, value, depth, seen)
  return copy
}

/** A log argument with credentials masked: strings by their content, errors as masked copies, objects as printed. */
function masked(arg: unknown): unknown {
  if (typeof arg === 'string') return maskSecrets(arg)
  if (isError(arg)) return maskedError(arg)
  if (arg && typeof arg === 'object') return maskSecrets(inspect(arg, { depth: MAX_DEPTH, breakLength: Infinity }))
  return arg
}

/**
 * `masked(arg)`, and never a throw: a log line must not fail the code that writes it. An error whose message or stack
 * cannot be read is printed as far as `inspect` can, else named as unprintable.
 */
export function maskedForLog(arg: unknown): unknown {
  try {
    return masked(arg)
  } catch {
    try {
      return maskSecrets(inspect(arg, { depth: MAX_DEPTH, breakLength: Infinity }))
    } catch {
      return '[a value that cannot be printed]'
    }
  }
}
