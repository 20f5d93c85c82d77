import { canonical } from './config/keys'
import { compileQueue, DEFAULT_QUEUE, queueSetting } from './config/queue'
import { idempotencyKeyHeader, inboxMessageId } from './config/receivers'
import { compileRunner } from './config/runner'
import type { Raw } from './config/values'
import { metaTenant, mtxsIsPlugin } from './cap/mtxs'
import { invalid } from './errors'
import { parseDuration } from './time/durations'
import { QueueRegistry } from './queues'
import type { ReceiverSettings, RunnerSettings } from './interfaces'

/**
 * The settings the runtime runs on: `cds.env` compiled once, when the plugin is loaded, and passed down from there.
 * Nothing after this reads `cds.env` again.
 */

/** The `cds.requires` entry that serves the operator service; `false` switches it off. */
export const OPERATOR_ENTRY = 'dead-letter-queue'
const DEFAULT_OPERATOR_ROLES = ['internal-user']
/** How often the ops page's backend samples the relay lag: 120 points for the hour its chart shows. */
const DEFAULT_LAG_SAMPLE_INTERVAL = '30s'
const MIN_LAG_SAMPLE_INTERVAL = 100

/** Everything the runtime needs from `cds.env`, compiled once. */
export interface Settings {
  runner: RunnerSettings
  queues: QueueRegistry
  /** CAP's `cds.env.appid`, which lets several apps share one table; none and `''` are the same: undefined. */
  appid: string | undefined
  /** False with `cds.requires.queue: false` or an in-memory kind: queued calls run after commit, nothing is stored. */
  persistent: boolean
  /** Roles the operator service requires (`cds.requires.dead-letter-queue.roles`). */
  operatorRoles: string[]
  /** How often the ops page's lag history is sampled, in ms (`cds.requires.dead-letter-queue.lagSampleInterval`). */
  lagSampleInterval: number
  /** Inboxes and idempotency keys of the configured services (the consumer half). */
  receivers: ReceiverSettings
}

/** The parts of `cds.env` the settings are compiled from. */
export interface Environment {
  requires?: Raw
  appid?: unknown
  /** The plugins cds found in the app's dependencies, by package name. */
  plugins?: Record<string, unknown>
  /** The active profiles (`NODE_ENV`, `CDS_ENV`): `production` refuses test modes. */
  profiles?: unknown
}

/**
 * `deliver: 'twice'` runs every handler twice: a test mode, refused in the production profile, where it would repeat
 * every remote call and every side effect of the app.
 */
function refuseTestModeInProduction(env: Environment, runner: RunnerSettings): void {
  const production = Array.isArray(env.profiles) && env.profiles.includes('production')
  if (!production || runner.deliver === 'once') return
  throw invalid('cds.requires.queue.deliver', runner.deliver, "'once' in the production profile ('twice' is a test mode: set it in the [test] profile only)")
}

/**
 * A multitenant app's queue needs @sap/cds-mtxs: each tenant's messages are in that tenant's database, found through
 * MTX's list of subscribed tenants and the register in its tenant t0 (docs/MULTITENANCY.md). Multitenancy without it
 * (`cds.requires.db.multiTenant: true` of @cap-js/sqlite, which cds turns into `cds.requires.multitenancy`) is refused
 * at start: otherwise every commit that enqueued in a tenant would fail on a t0 that does not exist.
 */
function requireMtxsWhereMultitenant(env: Environment): void {
  if (metaTenant(env) === undefined || mtxsIsPlugin(env)) return
  throw invalid(
    'cds.requires.multitenancy',
    env.requires?.multitenancy,
    "@sap/cds-mtxs among the app's plugins (npm add @sap/cds-mtxs), as cds-event-queues finds each tenant's messages " +
      'through MTX: its list of subscribed tenants, and its tenant t0, where every commit that enqueued registers its ' +
      'tenant; or no multitenancy (cds.requires.db.multiTenant: true switches it on too)'
  )
}


function operatorRoles(requires: Raw): string[] {
  const conf = requires[OPERATOR_ENTRY] as { roles?: unknown } | undefined
  const roles = (conf && typeof conf === 'object' ? conf.roles : undefined) ?? DEFAULT_OPERATOR_ROLES
  const list = typeof roles === 'string' ? [roles] : roles
  if (Array.isArray(list) && list.length > 0 && list.every(r => typeof r === 'string' && r.length > 0)) return list
  throw invalid(`cds.requires.${OPERATOR_ENTRY}.roles`, roles, "a role name or a non-empty list of role names, e.g. 'internal-user'")
}
function lagSampleInterval(requires: Raw): number {
  const conf = requires[OPERATOR_ENTRY]
  const value = conf && typeof conf === 'object' ? (conf as Raw).lagSampleInterval : undefined
  const where = `cds.requires.${OPERATOR_ENTRY}.lagSampleInterval`
  const ms = parseDuration(value ?? DEFAULT_LAG_SAMPLE_INTERVAL, where)
  if (ms < MIN_LAG_SAMPLE_INTERVAL) throw invalid(where, value, `a duration of at least ${MIN_LAG_SAMPLE_INTERVAL} ms, e.g. '30s'`)
  return ms
}

/** Whether queued messages are stored at all (`cds.requires.queue` is not `false`, nor an in-memory kind); never throws. */
export function persists(env: Environment): boolean {
  const queue = env.requires?.queue
  if (queue === false) return false
  const kind = queue && typeof queue === 'object' ? (queue as Raw).kind : undefined
  return kind === undefined || kind === 'persistent-queue' || kind === 'persistent-outbox'
}

/** `cds.requires.queue` as an object; `{}` when it is `true`, `false` or missing. */
function queueConfig(requires: Raw): Raw {
  const conf = requires.queue
  return conf && typeof conf === 'object' ? (conf as Raw) : {}
}

/** The consumer half's options of every service in `cds.requires`: `inboxed` and `idempotencyKey`. */
function receivers(requires: Raw): ReceiverSettings {
  const compiled: ReceiverSettings = { inboxes: new Map(), idempotencyKeys: new Map() }
  for (const [name, conf] of Object.entries(requires)) {
    if (!conf || typeof conf !== 'object' || name === DEFAULT_QUEUE) continue
    const inbox = inboxMessageId(conf as Raw, `cds.requires.${name}`)
    if (inbox !== undefined) compiled.inboxes.set(name, inbox)
    const header = idempotencyKeyHeader(conf as Raw, `cds.requires.${name}`)
    if (header) compiled.idempotencyKeys.set(name, header)
  }
  return compiled
}

/**
 * Compiles every queue-related setting: the runner's, the default queue's, every named queue and every service's
 * own queue (`outboxed`, messaging kinds). Throws on the first invalid value.
 */
export function compileSettings(env: Environment): Settings {
  const requires = (env.requires ?? {}) as Raw
  const global = canonical(queueConfig(requires), 'cds.requires.queue', 'runner')
  const defaultQueue = compileQueue(DEFAULT_QUEUE, global, 'cds.requires.queue')
  // `cds.requires.queue: false` switches persistence off for every queue (see QueueRegistry.define).
  if (requires.queue === false) defaultQueue.persistent = false
  const appid = typeof env.appid === 'string' && env.appid ? env.appid : undefined
  const queues = new QueueRegistry(defaultQueue, global, requires, appid)
  for (const [name, conf] of Object.entries(requires)) {
    if (!conf || typeof conf !== 'object' || name === DEFAULT_QUEUE) continue
    if (queueSetting(conf as Raw) !== undefined) queues.bind(name, conf as Raw)
  }
  if (defaultQueue.persistent) requireMtxsWhereMultitenant(env)
  const runner = compileRunner(global)
  refuseTestModeInProduction(env, runner)
  return {
    runner,
    queues,
    appid,
    persistent: defaultQueue.persistent,
    operatorRoles: operatorRoles(requires),
    lagSampleInterval: lagSampleInterval(requires),
    receivers: receivers(requires)
  }
}
