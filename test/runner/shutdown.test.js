const { startApp } = require('../support/app')
const { MESSAGES, capRow } = require('../support/outbox')
const { waitFor } = require('../support/wait')
const { eventQueues } = require('../../lib/plugin')
const cds = require('@sap/cds')

// Two slots, a grace period longer than a batch waits before handing back what has not started (1 s).
startApp({ requires: { queue: { concurrency: 2, pollInterval: '1h', shutdownGrace: '1500ms' } }, log: { levels: { queue: 'info' } } })

describe('graceful shutdown', () => {
  test('the shutdown log counts the handlers still running and the messages handed back, not the unstarted rest of their batches', async () => {
    const srv = await cds.connect.to('Target')
    const started = []
    // Every handler runs until its signal aborts, and takes a second more to stop (as a remote call that does not
    // take a signal would): only the first message of each batch ever starts, and the hand-back at shutdown, not the
    // handler's own end, gives its message back.
    srv.on('hang', req => {
      started.push(req.data.n)
      return new Promise((_, reject) => req.queue.signal.addEventListener('abort', () => setTimeout(() => reject(req.queue.signal.reason), 1000)))
    })
    const rows = Array.from({ length: 40 }, (_, n) => capRow({ event: 'hang', data: { n } }))
    await INSERT.into(MESSAGES).entries(rows)
    const { runner } = eventQueues()
    runner.wake()
    await waitFor(() => started.length === 2, { what: 'two running handlers' })
    // the batches hand back their unstarted messages after a second; the slots stay busy, so nothing is claimed again
    await waitFor(async () => (await SELECT.from(MESSAGES).where({ status: 'processing' })).length === 2, { what: 'the rest handed back' })

    const warn = jest.spyOn(console, 'warn')
    const info = jest.spyOn(console, 'info')
    await runner.stop()
    const logged = [...warn.mock.calls, ...info.mock.calls].map(args => args.join(' ')).filter(line => /shutdown|handed back/.test(line))
    warn.mockRestore()
    info.mockRestore()

    await waitFor(() => !runner.busy, { what: 'the aborted handlers to end' })
    expect(started).toHaveLength(2)
    expect(await SELECT.from(MESSAGES).where({ status: 'processing' })).toEqual([])
    expect((await SELECT.from(MESSAGES).where({ attempts: 0 })).length).toBe(40)
    expect(logged.join('\n')).toMatch(/\b2 handlers still running after the shutdown grace period of 1500 ms/)
    expect(logged.join('\n')).toMatch(/handed back 2 messages/)
    expect(logged.join('\n')).not.toMatch(/completed meanwhile/)
  })
})

describe('a stop while the runner starts', () => {
  // cds.test's teardown stops the app while the runner may still await its start's first statement: nothing of the
  // start may outlive the stop (on PostgreSQL a listening connection reconnecting after the database is gone).
  test('leaves nothing running: no loop, no listening connection', async () => {
    const { runner } = eventQueues()
    await runner.stop()
    const starting = runner.start()
    const stopping = runner.stop()
    await Promise.all([starting, stopping])
    expect(runner.running).toBe(false)
    expect(runner.notifier).toBeUndefined()
  })
})
