const { clock } = require('../../lib/time/clock')
const { newMessage } = require('../../lib/codec')

/**
 * The timestamps of messages enqueued one after another (lib/codec.ts `timestampAt`): strictly increasing within a
 * process, as ordering keys run a key's messages in timestamp order.
 */
describe('enqueue timestamps', () => {
  const encoded = { msg: '{}', service: 'Orders', event: 'placed' }

  test('stay increasing when the clock steps back between reading the time and stamping it (chaos seed 119)', () => {
    // A new reading of the database's clock (after a PostgreSQL restart) moves the queue's time back by a
    // millisecond right after an enqueue read it (the clock is asked T, then T - 1, then T): that message is not in
    // the future, and the next one still comes after it, whenever it asks the clock. Seed 119 saw e55 and e51 of key
    // k1 stamped alike, then ordered by their IDs.
    const T = Date.now()
    const now = jest.spyOn(clock, 'now')
    try {
      now.mockReturnValueOnce(T).mockReturnValueOnce(T - 1).mockReturnValue(T)
      const first = newMessage('Orders', encoded)
      const second = newMessage('Orders', encoded)
      expect(second.timestamp > first.timestamp).toBe(true)
      expect(first.dueAt.getTime()).toBe(T)
    } finally {
      now.mockRestore()
    }
  })

  test('a delayed message is stamped with its due time, to the millisecond', () => {
    const message = newMessage('Orders', encoded, 60_000)
    expect(message.timestamp).toBe(message.dueAt.toISOString().replace('Z', '0000Z'))
  })
})
