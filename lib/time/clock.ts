import { performance } from 'perf_hooks'

/**
 * The queue's time: the database's clock, as this process reads it. Leases, due times and CAP's timestamps are
 * compared across processes in the table, so they are all written and compared in one clock, the database's: a
 * process whose own clock runs 40 s ahead would otherwise take over a message whose lease another one renews, run a
 * delayed message early, or write leases others find expired. Between readings the time advances by the monotonic
 * clock (`performance.now()`), so setting the process's wall clock changes nothing either.
 */

/**
 * How far the monotonic clock may drift from the database's per ms: 500 ppm, the most NTP corrects a clock's rate by.
 * Beyond it, readings stop agreeing and the newest one wins (see `adjust`).
 */
const DRIFT = 5e-4

/** What the database said its time was (epoch ms), and when it was asked and answered (`performance.now()`). */
export interface ClockReading {
  time: number
  sent: number
  received: number
}

interface Estimate {
  /** The database's time (epoch ms) at `at`. */
  time: number
  /** `performance.now()` of the estimate. */
  at: number
  /** How far `time` may be off, either way (ms). */
  error: number
}

export class DatabaseClock {
  private estimate: Estimate | undefined

  /** Epoch ms by the database's clock; the process's own clock until the first reading. */
  now(): number {
    const e = this.estimate
    return e ? e.time + (performance.now() - e.at) : Date.now()
  }

  /**
   * Takes a reading of the database's clock into account. The database read its clock between sending and
   * receiving, so its time at `received` lies in an interval as wide as the round trip; where the last estimate
   * (advanced by the monotonic clock, its error grown by `DRIFT`) agrees, the two narrow it down together, so one slow
   * round trip (a loaded event loop) does not make the clock worse. Where they disagree, a clock was set: the new
   * reading counts alone.
   */
  adjust({ time, sent, received: at }: ClockReading): void {
    let low = time
    let high = time + (at - sent)
    const last = this.estimate
    if (last) {
      const age = at - last.at
      const predicted = last.time + age
      const spread = last.error + age * DRIFT
      if (predicted - spread <= high && predicted + spread >= low) {
        low = Math.max(low, predicted - spread)
        high = Math.min(high, predicted + spread)
      }
    }
    this.estimate = { time: (low + high) / 2, at, error: (high - low) / 2 }
  }
}

/** The process's one clock for the queue (the database's; one database server per app, see the README). */
export const clock = new DatabaseClock()
