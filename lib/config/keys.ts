import { warnOnce, type Raw } from './values'

/** The option names of each scope, and a key's canonical spelling (any case, as environment variables give them). */

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
