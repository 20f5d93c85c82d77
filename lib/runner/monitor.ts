import { EventEmitter } from 'events'
import type { Outcome } from '../interfaces'

/**
 * What the runner did, for tests and diagnostics to await instead of sleeping (as pg-boss's `spy` and
 * graphile-worker's `EventMonitor` do). Emitting costs nothing when nobody listens.
 */
export interface RunnerEvents {
  /** A claim took rows. */
  claimed: { count: number }
  /** What an attempt of a message came to, once it is written (and, with `deliver: 'twice'`, delivered again). */
  outcome: { ID: string; target: string; kind: Outcome['kind'] }
  /** A pass found nothing to claim with nothing running; `next` is the delay planned until the next pass (ms). */
  idle: { next: number | undefined }
}

export class Monitor extends EventEmitter {
  override emit<E extends keyof RunnerEvents>(event: E, payload: RunnerEvents[E]): boolean {
    return this.listenerCount(event) > 0 && super.emit(event, payload)
  }

  /** The next `event` whose payload matches `predicate`; rejects after `timeout` ms naming what it waited for. */
  next<E extends keyof RunnerEvents>(event: E, predicate: (payload: RunnerEvents[E]) => boolean = () => true, timeout = 10_000): Promise<RunnerEvents[E]> {
    return new Promise((resolve, reject) => {
      const listener = (payload: RunnerEvents[E]) => {
        if (!predicate(payload)) return
        clearTimeout(timer)
        this.off(event, listener)
        resolve(payload)
      }
      const timer = setTimeout(() => {
        this.off(event, listener)
        reject(new Error(`No '${event}' event of the queue runner within ${timeout} ms`))
      }, timeout)
      this.on(event, listener)
    })
  }
}
