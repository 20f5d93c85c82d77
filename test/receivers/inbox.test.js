const { startApp } = require('../support/app')
const { waitFor, sleep } = require('../support/wait')
const { MESSAGES, messages } = require('../support/outbox')
const cds = require('@sap/cds')

startApp({ requires: { queue: { backoff: { base: 10, max: 20 } } } })

describe('inbox', () => {
  let inbox
  const received = []
  beforeAll(async () => {
    inbox = await cds.connect.to('inbox')
    let failures = 0
    inbox.on('orders/created', msg => {
      if (msg.data.fail && failures++ < 2) throw new Error('subscriber not ready')
      received.push(msg.data.id)
    })
  })
  afterEach(() => DELETE.from(MESSAGES))

  test('an inbound message of an inboxed messaging service is persisted first and handled after commit', async () => {
    let stored
    const original = inbox.processInboundMsg.bind(inbox)
    // what a broker adapter does when a message arrives: hand it to the service, then acknowledge when this resolves
    await original({ user: cds.User.privileged }, { event: 'orders/created', data: { id: 'o1' }, headers: {} })
    stored = received.includes('o1')
    await waitFor(() => received.includes('o1'), { what: 'the subscriber' })
    expect(stored).toBe(false)
    await waitFor(async () => (await messages()).length === 0, { what: 'the inbox row deleted on commit' })
  })

  test('a failing subscriber is retried from the inbox row until it succeeds', async () => {
    await inbox.processInboundMsg({ user: cds.User.privileged }, { event: 'orders/created', data: { id: 'o2', fail: true }, headers: {} })
    await waitFor(async () => { await cds.flush(); return received.includes('o2') }, { what: 'the third attempt' })
    expect(received.filter(id => id === 'o2')).toHaveLength(1)
  })
})
