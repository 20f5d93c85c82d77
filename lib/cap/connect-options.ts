import cds from '@sap/cds'
import path from 'path'

/**
 * CAP internal: `cds.connect.to(name)` copies `cds.requires[name]` by spreading it when it connects (so a getter
 * there runs at that moment), decides from the copy's `outboxed` whether to queue the service, and loads a string
 * `impl` as a path from `cds.root` or else as a package (from `cds.root`, then `@sap/cds`). A messaging service an app
 * configures with `impl` only has no kind whose `outboxed: true` would queue it, so CAP's rule never queues it,
 * although every `cds.MessagingService` is queued by default. Contract: test/cap/cap-contract.test.js "connect options".
 */

type Entry = Record<string, unknown>

/** The class an impl module exports, as CAP's service factory takes it. */
function exportedClass(exported: unknown, name: string): unknown {
  if (typeof exported === 'function') return exported
  const module = exported as Record<string, unknown> | undefined
  return module?.[name] ?? module?.default
}

/** Whether `impl` of service `name` is a `cds.MessagingService` subclass; false for whatever cannot be loaded here. */
function isMessagingImpl(impl: string, name: string): boolean {
  try {
    let resolved: string
    try {
      resolved = require.resolve(path.join(cds.root, impl))
    } catch {
      resolved = require.resolve(impl, { paths: [cds.root, cds.home] })
    }
    const cls = exportedClass(require(resolved), name) as { prototype?: unknown } | undefined
    return !!cls?.prototype && cls.prototype instanceof cds.MessagingService
  } catch {
    return false // CAP reports it when it loads the impl itself
  }
}

/**
 * Makes `outboxed` of every `cds.requires` entry that has a string `impl`, no `kind` and no queue setting
 * (`outboxed`, `outbox`, `queued`) true when its impl is a messaging service: decided when `cds.connect.to` reads it,
 * as that loads the impl anyway; setting it overrides the decision.
 */
export function queueMessagingImpls(requires: Record<string, unknown>): void {
  for (const [name, conf] of Object.entries(requires)) {
    if (!conf || typeof conf !== 'object') continue
    const entry = conf as Entry
    if (typeof entry.impl !== 'string' || entry.kind !== undefined) continue
    if (['outboxed', 'outbox', 'queued'].some(key => entry[key] !== undefined)) continue
    const impl = entry.impl
    let decided: { value: unknown } | undefined
    Object.defineProperty(entry, 'outboxed', {
      configurable: true,
      enumerable: true,
      get: () => (decided ??= { value: isMessagingImpl(impl, name) || undefined }).value,
      set: value => (decided = { value })
    })
  }
}
