import { canonical, compileQueue, DEFAULT_QUEUE, queueSetting, type Raw } from './config'
import { invalid } from './errors'
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

  private queueOf(serviceName: string, conf: Raw | undefined, programmatic?: Raw): QueueSettings {
    const setting = queueSetting(conf)
    const given = programmatic && canonical(programmatic, `cds.queued(${serviceName}, options)`, 'service')
    if (typeof setting === 'string') {
      const named = this.requires[setting]
      const own = named && typeof named === 'object' ? canonical(named as Raw, `cds.requires.${setting}`, 'queue') : {}
      return this.define(setting, { ...this.global, ...own, ...given }, `cds.requires.${setting}`)
    }
    const where = `cds.requires.${serviceName}.outboxed`
    const own = setting && typeof setting === 'object' && !Array.isArray(setting) ? canonical(setting as Raw, where, 'service') : undefined
    if (own || (given && Object.keys(given).length)) {
      return this.define(serviceName, { ...this.global, ...own, ...given }, own ? where : `cds.queued(${serviceName}, options)`)
    }
    if (setting !== undefined && typeof setting !== 'boolean') {
      throw invalid(`cds.requires.${serviceName}.outboxed`, setting, 'true, false, a queue name, or an object of queue options')
    }
    return this.defaultQueue
  }

  /** The first definition of a queue wins, as CAP returns the same queued proxy on every `cds.queued` call. */
  private define(name: string, raw: Raw, where: string): QueueSettings {
    const known = this.byName.get(name)
    if (known) return known
    const queue = compileQueue(name, raw, where)
    if (!this.defaultQueue.persistent) queue.persistent = false
    this.byName.set(name, queue)
    return queue
  }

  /** Whether `name` is a queue defined so far (configured, or created with `cds.queued(srv, options)`). */
  knows(name: string): boolean {
    return this.byName.has(name) || this.byService.has(name)
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
