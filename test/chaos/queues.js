const { requires: APP } = require('./app/package.json').cds
const { QUEUE_OF } = require('./variants')

/**
 * What the checker needs to know of each service's queue, from the app's package.json and the seed's overrides,
 * read the way the README documents them: a service's own `outboxed: {…}` options, a named queue's options, and
 * `cds.requires.queue` for everything they leave out. Durations the app uses are whole seconds or milliseconds.
 */

function ms(text) {
  if (typeof text === 'number') return text
  const [, value, unit] = text.match(/^(\d+(?:\.\d+)?)(ms|s)$/)
  return Number(value) * (unit === 'ms' ? 1 : 1000)
}

function merged(base, extra) {
  const out = { ...base }
  for (const [k, v] of Object.entries(extra ?? {})) out[k] = v && typeof v === 'object' && !Array.isArray(v) ? merged(base?.[k], v) : v
  return out
}

/** `requires` of the seed merged over the app's; `maxAttempts`: the default queue's, as the seed has changed it. */
function queueSettings(requires, maxAttempts) {
  const all = merged(APP, requires)
  const runner = { ...all.queue, maxAttempts: maxAttempts ?? all.queue.maxAttempts }
  const settings = {}
  for (const [service, queue] of Object.entries(QUEUE_OF)) {
    const outboxed = all[service].outboxed
    const own = typeof outboxed === 'object' ? outboxed : typeof outboxed === 'string' ? all[outboxed] : {}
    const s = merged(runner, own)
    settings[service] = {
      queue,
      maxAttempts: s.maxAttempts,
      timeout: ms(s.timeout),
      handlerTimeout: s.handlerTimeout ? ms(s.handlerTimeout) : 3_600_000,
      pollInterval: ms(all.queue.pollInterval),
      ordering: s.orderingKey ? s.orderingOnDeadLetter ?? 'continue' : undefined,
      retention: s.deadLetterRetention ? ms(s.deadLetterRetention) : undefined,
      breaker: s.circuitBreaker && { failures: s.circuitBreaker.failures, probeInterval: ms(s.circuitBreaker.probeInterval) },
      rateLimit: s.rateLimit && { count: s.rateLimit.count, per: ms(s.rateLimit.per) }
    }
  }
  return settings
}

/** The settings of the queue named `target` (rows store their queue there). */
function byQueue(settings, target) {
  return Object.values(settings).find(s => s.queue === target)
}

module.exports = { queueSettings, byQueue, merged, ms }
