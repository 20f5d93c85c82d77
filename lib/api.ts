import cds from '@sap/cds'
import { queued, unqueued } from './queued'
import { runner } from './runner'
import { scheduleFor, unscheduleFor } from './schedule'

/** `cds.flush()`: processes every processable message until none is left. CAP's arguments are accepted and ignored. */
export function flush(): Promise<void> {
  return runner.flush()
}

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

/** Takes over CAP's queue API for the whole process; CAP's own implementation is never loaded. */
export function installApi(): void {
  define('queued', queued)
  define('outboxed', queued)
  define('unqueued', unqueued)
  define('unboxed', unqueued)
  define('flush', flush)
  defineOnServices('schedule', scheduleFor)
  defineOnServices('unschedule', unscheduleFor)
}
