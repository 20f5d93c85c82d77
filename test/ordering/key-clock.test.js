const { KeyClock } = require('../../lib/store/key-clock')

/** The portable store's per-key millisecond: keyed messages of one key never tie, whatever the database keeps. */
describe('the key clock of the portable store', () => {
  const T = Date.parse('2026-12-01T10:00:00.000Z')

  test('a message of the same millisecond as the previous one of its key gets the next one; other keys are not moved', () => {
    const clock = new KeyClock()
    expect(clock.next('o1', T, T)).toBe(T)
    expect(clock.next('o1', T, T)).toBe(T + 1)
    expect(clock.next('o2', T, T)).toBe(T)
    expect(clock.next('o1', T + 5, T + 5)).toBe(T + 5)
  })

  test('a message stamped before the clock turned to the next millisecond still follows the previous one of its key', () => {
    // o2:1 is written at T; o2:2 was stamped at T too, but is written at T + 1 (a busy event loop in between)
    const clock = new KeyClock()
    expect(clock.next('o2', T, T)).toBe(T)
    expect(clock.next('o2', T, T + 1)).toBe(T + 1)
    // the same after a long pause, as long as it is shorter than what the clock keeps
    expect(clock.next('o2', T + 1, T + 2000)).toBe(T + 2)
  })

  test('a delayed message keeps its due time and does not move the messages of its key that are due before it', () => {
    const clock = new KeyClock()
    expect(clock.next('o3', T + 4000, T)).toBe(T + 4000)
    expect(clock.next('o3', T, T)).toBe(T)
    expect(clock.next('o3', T + 1, T + 1)).toBe(T + 1)
  })

  test('entries older than KEPT go: keys are not remembered for ever', () => {
    const clock = new KeyClock()
    clock.next('old', T, T)
    expect(clock.next('old', T, T + KeyClock.KEPT + 1001)).toBe(T)
  })
})
