import { Runner } from './runner/runner'
import { compileSettings, type Environment, type Settings } from './settings'

/** The plugin in this process: its settings, compiled once when cds loads it, and the runner built on them. */
export interface EventQueues {
  readonly settings: Settings
  readonly runner: Runner
}

let active: EventQueues | undefined

/** Compiles the settings from `env` and creates the runner; called once, by cds-plugin.ts. */
export function activate(env: Environment): EventQueues {
  const settings = compileSettings(env)
  return (active = { settings, runner: new Runner(settings) })
}

/**
 * The active plugin, for what CAP instantiates by itself (the operator service's implementation, which cannot be
 * handed its dependencies).
 */
export function eventQueues(): EventQueues {
  if (!active) throw new Error('cds-event-queues is not active in this process: its cds-plugin was not loaded')
  return active
}
