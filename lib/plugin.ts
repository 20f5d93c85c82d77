import cds from '@sap/cds'
import { Health } from './ops/health'
import { Inbox } from './receipts/inbox'
import { Retention, type InTenant } from './ops/retention'
import { Runner } from './runner/runner'
import { compileSettings, type Environment, type Settings } from './settings'
import { QueueStatistics } from './ops/statistics'
import type { QueueObservations } from './telemetry/metrics'
import { withControls } from './controls/operator'

/** The plugin in this process: its settings, compiled once when cds loads it, and what runs on them. */
export interface EventQueues {
  readonly settings: Settings
  readonly runner: Runner
  /** The queue statistics behind the metrics' gauges and the health check's lag: one query per interval. */
  readonly statistics: QueueStatistics
  /** Deletes dead letters past their queue's `deadLetterRetention`. */
  readonly retention: Retention
  /** `cds.queued.health()`. */
  readonly health: Health
  /** Deduplicates inbound messages of inboxed messaging services. */
  readonly inbox: Inbox
}

let active: EventQueues | undefined

/** A transaction of its own in the database of `tenant`, detached from any caller's. */
const inTenant: InTenant = (tenant, fn) => cds.tx({ tenant }, fn) as unknown as ReturnType<typeof fn>

/** Compiles the settings from `env` and creates the runner; called once, by cds-plugin.ts. */
export function activate(env: Environment): EventQueues {
  const settings = compileSettings(env)
  const runner = new Runner(settings)
  const tenants = () => runner.tenants.all
  const blank = (queue: string) => ({ queue, pending: 0, processing: 0, dead: 0, relayLag: 0 })
  // with each queue's pause and circuit breaker, and a queue that has either but no messages: the gauges show them
  const count = async (now: number) => withControls(await runner.store.queueStatistics(settings.queues.attemptLimits(), now), settings.queues, settings.appid, blank)
  const statistics = new QueueStatistics((tenant, now) => inTenant(tenant, () => count(now)), settings.runner.statisticsInterval)
  const retention = new Retention(settings.queues, () => runner.store, tenants, inTenant)
  const health = new Health(settings, runner, statistics, tenants, inTenant)
  return (active = { settings, runner, statistics, retention, health, inbox: new Inbox(settings.receivers, settings.appid) })
}

/** What the queue gauges report: the statistics of every tenant this process looks after. */
export function queueObservations(plugin: EventQueues): QueueObservations {
  return () => Promise.all(plugin.runner.tenants.all.map(async tenant => ({ tenant, queues: (await plugin.statistics.current(tenant)).queues })))
}

/**
 * The active plugin, for what CAP instantiates by itself (the operator service's implementation, which cannot be
 * handed its dependencies).
 */
export function eventQueues(): EventQueues {
  if (!active) throw new Error('cds-event-queues is not active in this process: its cds-plugin was not loaded')
  return active
}
