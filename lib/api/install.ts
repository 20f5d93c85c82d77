import cds from '@sap/cds'
import type { EventQueues } from '../plugin'
import { queued, unqueued } from './queued'
import { scheduleFor, unscheduleFor } from './schedule'

function define(name: string, value: unknown): void {
  Object.defineProperty(cds, name, { value, configurable: true, writable: true })
}

/**
 * Replaces CAP's `srv.schedule` / `srv.unschedule` on every service, queued proxy or not. A getter, as in CAP 9, so
 * that `srv.schedule.task(...)` works: each service gets its own function on first use.
 */
function defineOnServices(name: string, make: (srv: cds.Service) => unknown): void {
  Object.defineProperty(cds.Service.prototype, name, {
    configurable: true,
    get(this: cds.Service) {
      const value = make(this)
      // Not cached on a prototype (someone inspecting cds.Service.prototype): it would shadow this getter.
      if (!Object.hasOwn(this, 'constructor')) Object.defineProperty(this, name, { value, configurable: true, writable: true })
      return value
    }
  })
}

/**
 * Takes over CAP's queue API for the whole process; CAP's own implementation is never loaded. `cds.connect.to`
 * queues services configured `outboxed` by calling `cds.queued`, so it gets this one too.
 */
export function installApi(plugin: EventQueues): void {
  // `cds.queued.health()`: the queue's readiness, for the app's health endpoint.
  const queue = Object.assign((srv: unknown, opts?: unknown) => queued(plugin, srv, opts), { health: (options?: unknown) => plugin.health.check(options) })
  // `cds.flush()`: CAP's arguments are accepted and ignored; every queue is processed until none is left.
  const flush = () => plugin.runner.flush()
  define('queued', queue)
  define('outboxed', queue)
  define('unqueued', unqueued)
  define('unboxed', unqueued)
  define('flush', flush)
  defineOnServices('schedule', srv => scheduleFor(srv))
  defineOnServices('unschedule', srv => unscheduleFor(plugin, srv))
}
