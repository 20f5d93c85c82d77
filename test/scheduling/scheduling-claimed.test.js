const { startApp, onPortableStore } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES, capRow } = require('../support/outbox')
const cds = require('@sap/cds')

/**
 * An occurrence claimed but not started yet — behind a message of the same claim in its slot — when its task is
 * unscheduled or re-scheduled. Chaos seed 14 (I14): such an occurrence started 0.3 s after `unschedule` had returned 1,
 * and one of an old version ran after the re-schedule. Claimed is not yet running: SCHEDULING.md's "a run in progress
 * completes" is about a handler that started. One slot, and no polls: `cds.flush()` claims both rows at once, the
 * message first (it is due first), and runs them one after the other. The message is a row another process wrote
 * (CAP's format), which this one does not claim as it is enqueued. The portable store claims such rows in a claim of
 * their own, after its own rows, so there the two never share a slot this way: the suite runs on the native store (the
 * check before the run is the same code on both).
 */
startApp({ requires: { queue: { pollInterval: '1h', concurrency: 1 } } })

const describeNative = onPortableStore() ? describe.skip : describe

describeNative('an occurrence claimed behind a running message', () => {
  let srv
  const runs = []
  /** The message ahead runs until `release()`; `started` resolves when it runs. */
  let ahead
  const gate = () => {
    const g = {}
    g.started = new Promise(resolve => (g.start = resolve))
    g.released = new Promise(resolve => (g.release = resolve))
    return g
  }

  beforeAll(async () => {
    srv = await cds.connect.to('Target')
    srv.on('ahead', async () => {
      ahead.start()
      await ahead.released
    })
    srv.on('tick', async req => {
      runs.push(req.data)
      await INSERT.into('Target.Records').entries({ ID: cds.utils.uuid(), kind: 'tick', message: `v${req.data.v}` })
    })
  })

  beforeEach(() => (ahead = gate()))
  afterEach(async () => {
    ahead.release()
    runs.length = 0
    await DELETE.from(MESSAGES)
    await DELETE.from('Target.Records')
  })

  /** Writes the message and the task due together, claims both with one flush, and waits until the message runs. */
  async function claimBoth() {
    await cds.tx(async () => {
      await INSERT.into(MESSAGES).entries(capRow({ event: 'ahead' }))
      await srv.schedule('tick', { v: 1 }).every('1h')
    })
    const flushed = cds.flush()
    await ahead.started
    expect(await SELECT.one.from(MESSAGES).where({ task: 'tick' })).toMatchObject({ claimedBy: expect.any(String) })
    return { flushed }
  }

  test('unscheduled meanwhile, it does not run', async () => {
    const { flushed } = await claimBoth()
    expect(await srv.unschedule('tick')).toBe(1)
    ahead.release()
    await flushed
    await cds.flush()
    expect(runs).toEqual([])
    expect(await SELECT.from('Target.Records')).toEqual([])
    expect(await SELECT.from(MESSAGES)).toEqual([])
  })

  test('re-scheduled meanwhile, it does not run: the new schedule does, once', async () => {
    const { flushed } = await claimBoth()
    await srv.schedule('tick', { v: 2 }).every('1h')
    ahead.release()
    await flushed
    await cds.flush()
    expect(runs).toEqual([{ v: 2 }])
    expect(await SELECT.from('Target.Records').columns('message')).toEqual([{ message: 'v2' }])
    expect(await SELECT.from(MESSAGES).columns('task', 'attempts', 'claimedBy')).toEqual([{ task: 'tick', attempts: 0, claimedBy: null }])
  })
})
