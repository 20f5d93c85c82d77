const { performance } = require('perf_hooks')
const { DatabaseClock } = require('../lib/time/clock')

/**
 * The queue's clock (lib/time/clock.ts): the database's time from its readings, advanced by the monotonic clock.
 * Readings are given as the store takes them: the database's time, and when it was asked and answered.
 */
describe("the queue's clock", () => {
  const T = Date.parse('2026-12-01T10:00:00.000Z')
  /** How far `clock` is from `expected` (epoch ms at the monotonic time `at`), now (a pause while it is asked adds nothing). */
  function offBy(clock, expected, at) {
    const before = performance.now()
    const now = clock.now()
    const after = performance.now()
    return Math.max(0, expected + (before - at) - now, now - (expected + (after - at)))
  }

  test("until the database was read it is the process's own clock", () => {
    const clock = new DatabaseClock()
    const before = Date.now()
    const now = clock.now()
    expect(now).toBeGreaterThanOrEqual(before)
    expect(now).toBeLessThanOrEqual(Date.now())
  })

  test("a reading sets it to the database's time, whatever the process's clock says, and it advances from there", () => {
    const clock = new DatabaseClock()
    const received = performance.now()
    // a round trip of 10 ms: the database's time at `received` is between T and T + 10
    clock.adjust({ time: T, sent: received - 10, received })
    expect(offBy(clock, T + 5, received)).toBeLessThanOrEqual(1)
  })

  test('a slow round trip that agrees with an earlier sharp reading does not make the clock worse', () => {
    const clock = new DatabaseClock()
    const first = performance.now() - 1000
    clock.adjust({ time: T, sent: first - 2, received: first })
    // 1 s later by the monotonic clock, a reading that took 4 s (a stalled event loop): only T + 999 … T + 1001 fits both
    const received = first + 1000
    clock.adjust({ time: T - 3000, sent: received - 4000, received })
    expect(offBy(clock, T + 1000, received)).toBeLessThanOrEqual(2)
  })

  test('a reading that contradicts the estimate beyond both errors (a clock was set) counts alone', () => {
    const clock = new DatabaseClock()
    const first = performance.now() - 1000
    clock.adjust({ time: T, sent: first - 2, received: first })
    const received = first + 1000
    clock.adjust({ time: T + 41_000, sent: received - 2, received })
    expect(offBy(clock, T + 41_001, received)).toBeLessThanOrEqual(1)
  })
})
