import { canonical } from './config/keys'
import { compileQueue, DEFAULT_QUEUE, queueSetting } from './config/queue'
import type { Raw } from './config/values'
import { describe, invalid } from './errors'
import type { QueueSettings } from './interfaces'
import { serviceOfOldRow, type AttemptLimits, type Retentions } from './store/rules'
import { LOG } from './log'

/**
 * The settings of every queue this process knows, by name (the `target` of their rows), and which queue each
 * service's messages go to. Filled when the plugin starts from the configuration, and by `cds.queued(srv, options)`.
 * Looking up a queue never reads configuration and never fails: a row of a queue this process was not told about
 * (another instance's `cds.queued(srv, options)`, an older app version) runs with the default queue's settings.
 */
export class QueueRegistry {
  private readonly byName = new Map<string, QueueSettings>()
  /** Rows of older CAP versions name the service, not the queue: the queue of each service bound so far. */
  private readonly byService = new Map<string, QueueSettings>()
  /** What each queue was compiled from, and where that is configured: options given later are compared with it. */
  private readonly sources = new Map<string, { raw: Raw; where: string }>()
  private readonly warned = new Set<string>()

  constructor(
    readonly defaultQueue: QueueSettings,
    /** `cds.requires.queue`: the base of every queue's options. */
    private readonly global: Raw,
    /** `cds.requires`, as the plugin found it at start (named queues are read from it). */
    private readonly requires: Raw,
    /** CAP's `appid`: old rows name `<appid><service>` as their target. */
    private readonly appid?: string
  ) {
    this.byName.set(DEFAULT_QUEUE, defaultQueue)
    this.sources.set(DEFAULT_QUEUE, { raw: global, where: `cds.requires.${DEFAULT_QUEUE}` })
  }

  /**
   * The queue of a service's messages, following CAP's rules: `outboxed: 'name'` a named queue with the options of
   * `cds.requires.name`; `outboxed: {…}` or options given to `cds.queued(srv, options)` a queue of its own, named
   * after the service (so they never leak into the queue other services share); anything else the default queue.
   */
  bind(serviceName: string, conf: Raw | undefined, programmatic?: Raw): QueueSettings {
    const queue = this.queueOf(serviceName, conf, programmatic)
    if (!this.byService.has(serviceName)) this.byService.set(serviceName, queue)
    return queue
  }

  /**
   * Options given to `cds.queued(srv, options)` for a service whose queue is set already (an earlier call, or
   * `cds.connect.to` by its configuration): validated as if they defined the queue, and where they differ from it,
   * ignored with a warning. The service keeps its queue, as CAP returns the first proxy on every call; a queue's
   * options changing under its messages would make the runners of two instances disagree about them.
   */
  confirm(queue: QueueSettings, serviceName: string, programmatic: Raw): void {
    const where = `cds.queued(${serviceName}, options)`
    this.compare(queue, serviceName, canonical(programmatic, where, 'service'), where)
  }

  private compare(queue: QueueSettings, serviceName: string, given: Raw, where: string): void {
    const source = this.sources.get(queue.name) ?? { raw: this.global, where: `cds.requires.${DEFAULT_QUEUE}` }
    const wanted = compileQueue(queue.name, { ...source.raw, ...given }, where)
    const ignored = Object.keys(given).filter(key => !sameOption(key, queue, wanted, source.raw, given))
    if (!ignored.length) return
    const inEffect = (key: string) => describe(source.raw[key] ?? (queue as unknown as Raw)[key])
    const configured = this.requires[serviceName] ? `where the service is configured (cds.requires.${serviceName}.outboxed) or ` : ''
    this.warnOnce(
      `${where}: the service is queued already, on queue '${queue.name}' (options from ${source.where}), and keeps it: ` +
        `ignored ${ignored.map(key => `${key} ${describe(given[key])} (in effect: ${inEffect(key)})`).join(', ')}. ` +
        `Give queue options ${configured}to its first cds.queued call.`
    )
  }

  private queueOf(serviceName: string, conf: Raw | undefined, programmatic?: Raw): QueueSettings {
    const setting = queueSetting(conf)
    const given = programmatic && canonical(programmatic, `cds.queued(${serviceName}, options)`, 'service')
    if (typeof setting === 'string') {
      const named = this.namedQueue(serviceName, setting)
      return this.define(serviceName, setting, { ...this.global, ...named.options }, named.where, given)
    }
    const where = `cds.requires.${serviceName}.outboxed`
    const own = setting && typeof setting === 'object' && !Array.isArray(setting) ? canonical(setting as Raw, where, 'service') : undefined
    if (own) return this.define(serviceName, serviceName, { ...this.global, ...own }, where, given)
    if (given && Object.keys(given).length) return this.define(serviceName, serviceName, this.global, `cds.requires.${DEFAULT_QUEUE}`, given)
    if (setting !== undefined && typeof setting !== 'boolean') {
      throw invalid(where, setting, 'true, false, a queue name, or an object of queue options')
    }
    return this.defaultQueue
  }

  /**
   * The options of the named queue `name` (`cds.requires.name`). A name without that entry is most likely a mistake
   * (`outboxed: 'yes'`): it still gets a queue of that name with the default options, and a warning.
   */
  private namedQueue(serviceName: string, name: string): { options: Raw; where: string } {
    const where = `cds.requires.${name}`
    const named = this.requires[name]
    if (named && typeof named === 'object') return { options: canonical(named as Raw, where, 'queue'), where }
    const known = [`${DEFAULT_QUEUE} (the default, outboxed: true)`, ...this.namedQueues()]
    this.warnOnce(
      `cds.requires.${serviceName}.outboxed names the queue '${name}', which has no ${where}: its messages go to a queue ` +
        `'${name}' with the options of cds.requires.${DEFAULT_QUEUE}. Known queues: ${known.join(', ')}. ` +
        `Add ${where} (with its options, or {}) if a queue of its own is meant.`
    )
    return { options: {}, where: `cds.requires.${DEFAULT_QUEUE}` }
  }

  /** The queues services name in `outboxed` that have a `cds.requires` entry of their own. */
  private namedQueues(): string[] {
    const names = Object.values(this.requires).map(conf => (conf && typeof conf === 'object' ? queueSetting(conf as Raw) : undefined))
    return [...new Set(names.filter((n): n is string => typeof n === 'string' && n !== DEFAULT_QUEUE && !!this.requires[n] && typeof this.requires[n] === 'object'))].sort()
  }

  /**
   * The first definition of a queue wins, as CAP returns the same queued proxy on every `cds.queued` call: options
   * `given` to a later call are compared with it (see `confirm`).
   */
  private define(serviceName: string, name: string, raw: Raw, where: string, given?: Raw): QueueSettings {
    const call = given && Object.keys(given).length ? `cds.queued(${serviceName}, options)` : undefined
    const known = this.byName.get(name)
    if (known) {
      if (call) this.compare(known, serviceName, given!, call)
      return known
    }
    // the configured options first, so that an error names where the invalid value is
    let queue = compileQueue(name, raw, where)
    if (call) queue = compileQueue(name, { ...raw, ...given }, call)
    if (!this.defaultQueue.persistent) queue.persistent = false
    this.byName.set(name, queue)
    this.sources.set(name, call ? { raw: { ...raw, ...given }, where: `${where} and ${call}` } : { raw, where })
    return queue
  }

  /** Whether `name` is a queue defined so far (configured, or created with `cds.queued(srv, options)`). */
  knows(name: string): boolean {
    return this.byName.has(name) || this.byService.has(name)
  }

  private warnOnce(message: string): void {
    if (this.warned.has(message)) return
    this.warned.add(message)
    LOG.warn(message)
  }

  /** The queue a service's messages go to: the one it was bound to, else the one its configuration names. */
  queueOfService(serviceName: string): QueueSettings {
    return this.byService.get(serviceName) ?? this.queueOf(serviceName, this.requires[serviceName] as Raw | undefined)
  }

  /** Every queue defined so far. */
  all(): QueueSettings[] {
    return [...this.byName.values()]
  }

  /**
   * The settings for rows whose `target` is `target`: its queue; for rows of older CAP versions (target = the
   * service name) the queue of that service; else the default queue's, with a warning once per target.
   */
  forTarget(target: string): QueueSettings {
    const service = serviceOfOldRow(target, this.appid)
    const queue = this.byName.get(target) ?? this.byService.get(target) ?? this.byService.get(service)
    if (queue) return queue
    if (!this.warned.has(target)) {
      this.warned.add(target)
      LOG.warn(`messages of queue '${target}' are processed with the settings of the default queue: this process does not know that queue (it is configured or created with cds.queued(srv, options) elsewhere)`)
    }
    return this.defaultQueue
  }

  /**
   * The attempt limits of every target known so far, for SQL and CQN that decide dead letters like `forTarget`:
   * targets whose queue allows as many attempts as the default queue need no entry of their own.
   */
  attemptLimits(): AttemptLimits {
    const { byValue, otherwise } = this.grouped(queue => queue.maxAttempts)
    return { byLimit: byValue, otherwise }
  }

  /** The dead-letter retention of every target known so far, grouped as `attemptLimits` groups the limits. */
  retentions(): Retentions {
    const { byValue, otherwise } = this.grouped(queue => queue.deadLetterRetention)
    return { byRetention: byValue, otherwise }
  }

  /** The targets whose queue's `value` differs from the default queue's, by value; `otherwise` the default's. */
  private grouped<V>(value: (queue: QueueSettings) => V): { byValue: Map<V, string[]>; otherwise: V } {
    const otherwise = value(this.defaultQueue)
    const byValue = new Map<V, string[]>()
    for (const [target, queue] of [...this.byService, ...this.byName]) {
      const v = value(queue)
      if (v === otherwise) continue
      const targets = byValue.get(v) ?? []
      if (!targets.includes(target)) targets.push(target)
      byValue.set(v, targets)
    }
    return { byValue, otherwise }
  }
}

/** A value as the warning compares it: functions (an `orderingKey`) by their source, a handler's call passes a new one. */
const comparable = (value: unknown) => (typeof value === 'function' ? String(value) : JSON.stringify(value))

/**
 * Whether option `key` means the same in `queue` and in `wanted`: their compiled values ('1h' and 3600000 are the
 * same timeout), or where a setting compiles to a function, the values it was given as.
 */
function sameOption(key: string, queue: QueueSettings, wanted: QueueSettings, raw: Raw, given: Raw): boolean {
  const [a, b] = [(queue as unknown as Raw)[key], (wanted as unknown as Raw)[key]]
  if (key in queue && typeof a !== 'function' && typeof b !== 'function') return comparable(a) === comparable(b)
  return comparable(raw[key]) === comparable(given[key])
}
