import cds from '@sap/cds'
import { queued, unqueued } from './queued'
import { runner } from './runner'

/** `cds.flush()`: processes every processable message until none is left. CAP's arguments are accepted and ignored. */
export function flush(): Promise<void> {
  return runner.flush()
}

function define(name: string, value: unknown): void {
  Object.defineProperty(cds, name, { value, configurable: true, writable: true })
}

/** Takes over CAP's queue API for the whole process; CAP's own implementation is never loaded. */
export function installApi(): void {
  define('queued', queued)
  define('outboxed', queued)
  define('unqueued', unqueued)
  define('unboxed', unqueued)
  define('flush', flush)
}
