import { performance } from 'perf_hooks'

/**
 * The queue's time: the database's clock, as this process reads it. Leases, due times and CAP's timestamps are
 * compared across processes in the table, so they are all written and compared in one clock, the database's: a
 * process whose own clock runs 40 s ahead would otherwise take over a message whose lease another one renews, run a
 * delayed message early, or write leases others find expired. Between readings, what they allow advances with the
 * monotonic clock (`performance.now()`), so setting the process's wall clock meanwhile moves the queue's time no
 * further than the readings' uncertainty.
 */

/**
 * How far the monotonic clock may drift from the database's per ms: 500 ppm, the most NTP corrects a clock's rate by.
 * Beyond it, readings stop agreeing and the newest one wins (see `adjust`).
 */
const DRIFT = 5e-4

/** Readings and `Date.now()` are whole milliseconds. */
const RESOLUTION = 1

/** What the database said its time was (epoch ms), and when it was asked and answered (`performance.now()`). */
export interface ClockReading {
  time: number
  sent: number
  received: number
}

/**
 * The database's time now as a process knows it (epoch ms, whole): no earlier than `earliest`, no later than `latest`.
 * Both are the process's own clock where it agrees with the readings (as `now()` says it).
 */
export interface Span {
  earliest: number
  latest: number
}

/** Where the database's time (epoch ms) was at `at` (`performance.now()`): between `low` and `high`. */
interface Estimate {
  low: number
  high: number
  at: number
}

export class DatabaseClock {
  private estimate: Estimate | undefined

  /**
   * Epoch ms by the database's clock. Where the process's own clock agrees with it as far as the readings tell (on
   * the database's host, or kept in sync by NTP), that is the process's clock, to the millisecond; where it does not,
   * the nearest time the readings allow. Until the first reading, the process's clock.
   */
  now(): number {
    const own = Date.now()
    const e = this.estimate
    if (!e) return own
    const { low, high } = advanced(e, performance.now())
    // whole milliseconds, as the table stores times: a claim recognizes its rows by the claimedAt it wrote
    return Math.round(Math.min(Math.max(own, low), high))
  }

  /**
   * What the readings allow the database's time to be now: for what must not come early by any clock, as a rate
   * limit's window shared by instances whose clocks disagree (controls/rate-window.ts). `now()` says one time within
   * it, the nearest to the process's own; where that clock is off, the database's time may be the round trip of the
   * readings earlier or later — and an instance whose clock is ahead would take a window's starts as gone that early.
   */
  span(): Span {
    const own = Date.now()
    const e = this.estimate
    if (!e) return { earliest: own, latest: own }
    const { low, high } = advanced(e, performance.now())
    if (own >= low && own <= high) return { earliest: own, latest: own }
    return { earliest: Math.floor(low), latest: Math.ceil(high) }
  }

  /** Whether the database's clock was read at all: until then `now()` is only the process's own clock. */
  get read(): boolean {
    return this.estimate !== undefined
  }

  /**
   * Takes a reading of the database's clock into account. The database read its clock between sending and
   * receiving, so its time at `received` lies in an interval as wide as the round trip; where the last estimate
   * (advanced by the monotonic clock, widened by `DRIFT`) agrees, the two narrow it down together, so one slow round
   * trip (a loaded event loop) does not make the clock worse. Where they disagree, a clock was set: the new reading
   * counts alone.
   */
  adjust({ time, sent, received: at }: ClockReading): void {
    let low = time - RESOLUTION
    let high = time + (at - sent) + RESOLUTION
    const last = this.estimate && advanced(this.estimate, at)
    if (last && last.low <= high && last.high >= low) {
      low = Math.max(low, last.low)
      high = Math.min(high, last.high)
    }
    this.estimate = { low, high, at }
  }
}

/** `estimate` at the later monotonic time `at`. */
function advanced(estimate: Estimate, at: number): Estimate {
  const age = at - estimate.at
  const spread = age * DRIFT
  return { low: estimate.low + age - spread, high: estimate.high + age + spread, at }
}

/** The process's one clock for the queue (the database's; one database server per app, see docs/DATABASES.md#postgresql-and-multiple-instances). */
export const clock = new DatabaseClock()
