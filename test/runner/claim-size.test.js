const { startApp } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES, capRow } = require('../support/outbox')
const cds = require('@sap/cds')

/**
 * `maxClaimBytes` bounds what a process holds of its messages: its claims take rows while their stored messages add up
 * to what its slots leave of it. Here 10 KB, with messages of 4 KB: at most three run at once (two fill 8 KB, and a
 * claim takes one more while anything is left), whatever `concurrency` allows.
 */
const MAX_CLAIM_BYTES = 10 * 1024
startApp({ requires: { queue: { pollInterval: '200ms', concurrency: 10, maxClaimBytes: MAX_CLAIM_BYTES } } })

describe('claims bounded in bytes (maxClaimBytes)', () => {
  let srv
  beforeAll(async () => {
    srv = await cds.connect.to('Target')
  })
  afterEach(() => DELETE.from(MESSAGES))

  /** Rows as another process writes them (no claim at enqueue): `count` `event` messages of `bytes` characters of data. */
  const backlog = (event, count, bytes) =>
    INSERT.into(MESSAGES).entries(Array.from({ length: count }, (_, n) => capRow({ event, data: { n, payload: 'x'.repeat(bytes) } })))

  test('messages of 4 KB run at most three at a time with 10 KB, and all of them run', async () => {
    const running = new Set()
    const gates = new Map()
    let most = 0
    srv.on('held', req => {
      running.add(req.data.n)
      most = Math.max(most, running.size)
      return new Promise(resolve => gates.set(req.data.n, resolve)).finally(() => running.delete(req.data.n))
    })
    await backlog('held', 10, 4096)
    // one running message at a time is let finish, and the runner starts what the freed bytes allow
    const released = new Set()
    while (released.size < 10) {
      const { n } = await waitFor(() => {
        const n = [...gates.keys()].find(k => !released.has(k))
        return n !== undefined && { n }
      }, { what: `a running message (${released.size} finished)` })
      released.add(n)
      gates.get(n)()
    }
    await waitFor(async () => (await SELECT.from(MESSAGES)).length === 0, { what: 'every message completed' })
    expect(most).toBeGreaterThan(1)
    expect(most).toBeLessThanOrEqual(3)
  })

  test('a message larger than maxClaimBytes is claimed alone and runs', async () => {
    const ran = []
    let running = 0
    let most = 0
    srv.on('large', async req => {
      most = Math.max(most, ++running)
      // long enough for a claim of the other message to start it meanwhile, if one could
      await new Promise(resolve => setTimeout(resolve, 200))
      running--
      ran.push(req.data.n)
    })
    await backlog('large', 2, 3 * MAX_CLAIM_BYTES)
    await waitFor(() => ran.length === 2, { what: 'both large messages' })
    expect(ran.sort()).toEqual([0, 1])
    expect(most).toBe(1)
  })
})
