const { performance } = require('perf_hooks')
const { DatabaseClock } = require('../../lib/time/clock')

/**
 * The queue's clock (lib/time/clock.ts): the database's time from its readings, advanced by the monotonic clock, and
 * the process's own clock where it agrees with them. Readings are given as the store takes them: the database's time
 * (whole milliseconds), and when it was asked and answered.
 */
describe("the queue's clock", () => {
  const T = Date.parse('2026-12-01T10:00:00.000Z')

  /**
   * Whether `clock` says a time between `low` and `high` (epoch ms at the monotonic time `at`), advanced to now, to
   * the millisecond; a pause while it is asked adds nothing.
   */
  function between(clock, low, high, at) {
    const before = performance.now()
    const now = clock.now()
    const after = performance.now()
    // the clock says whole milliseconds: rounding moves it by up to half of one
    return now >= low + (before - at) - 0.51 && now <= high + (after - at) + 0.51
  }

  /** Whether `clock` says the process's own time. */
  function saysOwnTime(clock) {
    const before = Date.now()
    const now = clock.now()
    return now >= before && now <= Date.now()
  }

  test("until the database was read it is the process's own clock", () => {
    expect(saysOwnTime(new DatabaseClock())).toBe(true)
  })

  test("a reading 40 s away from the process's clock sets it to the database's time, which advances from there", () => {
    const clock = new DatabaseClock()
    const received = performance.now()
    const time = Date.now() + 40_000
    // a round trip of 10 ms: the database's time at `received` is between `time` and `time` + 10 (+ 1 ms resolution)
    clock.adjust({ time, sent: received - 10, received })
    expect(between(clock, time - 1, time + 11, received)).toBe(true)
  })

  test('where it corrects the process\'s clock it says whole milliseconds, as the table stores them', () => {
    // a claim compares the claimedAt it wrote with the one it reads back: a fraction of a millisecond is lost in the
    // table, and the claim would not recognize its own row
    const clock = new DatabaseClock()
    const received = performance.now()
    clock.adjust({ time: Date.now() + 40_000, sent: received - 0.37, received })
    for (let i = 0; i < 50; i++) expect(Number.isInteger(clock.now())).toBe(true)
  })

  test("where the process's clock agrees with the readings, it is the process's clock", () => {
    const clock = new DatabaseClock()
    const received = performance.now()
    const time = Date.now()
    clock.adjust({ time: time - 3, sent: received - 10, received })
    expect(saysOwnTime(clock)).toBe(true)
  })

  test("its span is the process's own time where that agrees, and the readings' uncertainty where it does not", () => {
    const agreeing = new DatabaseClock()
    const at = performance.now()
    agreeing.adjust({ time: Date.now() - 3, sent: at - 10, received: at })
    const before = Date.now()
    const { earliest, latest } = agreeing.span()
    expect([earliest >= before, earliest === latest, latest <= Date.now()]).toEqual([true, true, true])

    const ahead = new DatabaseClock()
    const received = performance.now()
    const time = Date.now() - 40_000
    ahead.adjust({ time, sent: received - 200, received })
    const span = ahead.span()
    const age = performance.now() - received
    // between the reading's time and 200 ms (+ 1 ms resolution) later, advanced since, in whole milliseconds
    expect(span.earliest).toBeLessThanOrEqual(time + age)
    expect(span.earliest).toBeGreaterThanOrEqual(Math.floor(time - 1))
    expect(span.latest).toBeGreaterThanOrEqual(time + 200 + age)
    expect(span.latest - span.earliest).toBeLessThanOrEqual(203 + age)
  })

  test('a slow round trip that agrees with an earlier sharp reading does not make the clock worse', () => {
    const clock = new DatabaseClock()
    const first = performance.now() - 1000
    clock.adjust({ time: T, sent: first - 2, received: first })
    // 1 s later by the monotonic clock, a reading that took 4 s (a stalled event loop): both allow T + 999 … T + 1001
    const received = first + 1000
    clock.adjust({ time: T - 2999, sent: received - 4000, received })
    expect(between(clock, T + 999, T + 1002, received)).toBe(true)
  })

  test('a reading that contradicts the estimate beyond both errors (a clock was set) counts alone', () => {
    const clock = new DatabaseClock()
    const first = performance.now() - 1000
    clock.adjust({ time: T, sent: first - 2, received: first })
    const received = first + 1000
    clock.adjust({ time: T + 41_000, sent: received - 2, received })
    expect(between(clock, T + 40_999, T + 41_003, received)).toBe(true)
  })
})
