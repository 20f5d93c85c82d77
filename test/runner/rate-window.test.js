const { performance } = require('perf_hooks')
const { DatabaseClock } = require('../../lib/time/clock')
const { take } = require('../../lib/controls/rate-window')

/**
 * A queue's shared rate window (lib/controls/rate-window.ts) as instances with different clocks take from it: each
 * in the database's time as its clock (lib/time/clock.ts) knows it — exactly where the process's own clock agrees
 * with the database, to within its readings' round trips where it does not.
 */
describe("a rate limit's shared window", () => {
  const limit = { count: 5, per: 1000 }

  test("an instance whose own clock is 45 s ahead, read with a slow round trip, counts the others' starts of the last second", () => {
    // this process's clock is the instance's, 45 s ahead of the database's
    const databaseNow = () => Date.now() - 45_000
    const ahead = new DatabaseClock()
    const received = performance.now()
    // the database read its clock at the end of a 200 ms round trip (a loaded machine): the instance knows the
    // database's time to within those 200 ms
    ahead.adjust({ time: databaseNow(), sent: received - 200, received })
    // an instance on the database's clock took the window's 5 starts 850 ms ago
    const { window } = take(undefined, limit, 5, { earliest: databaseNow() - 850, latest: databaseNow() - 850 })
    // none of them has left the window yet, whatever the database's time within the instance's uncertainty
    expect(take(window, limit, 1, ahead.span()).granted).toBe(0)
  })

  test('a start is counted from the latest time the instance may be at: it leaves the window no earlier than a second later', () => {
    const span = { earliest: 10_000, latest: 10_200 }
    const { window } = take(undefined, limit, 5, span)
    // at the earliest, the second after the latest time these starts may have been taken has not passed
    expect(take(window, limit, 1, { earliest: 11_150, latest: 11_150 }).granted).toBe(0)
    expect(take(window, limit, 1, { earliest: 11_210, latest: 11_210 }).granted).toBe(1)
  })
})
