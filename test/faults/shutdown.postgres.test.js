const { createDatabase, newDatabaseName, withClient } = require('../support/postgres')
const { startInstance, stopInstance, enqueueFromAnotherProcess } = require('../support/instances')
const { counts, drained, sideEffectsFile, sideEffects } = require('../support/faults')
const { waitFor } = require('../support/wait')

const MESSAGES = 200

describe('faults: graceful shutdown', () => {
  const database = newDatabaseName()
  const query = async sql => (await withClient(client => client.query(sql), database)).rows
  const running = []

  beforeAll(() => createDatabase(database))
  afterAll(() => Promise.all(running.map(child => stopInstance(child))))

  test('SIGTERM with 50 handlers in flight: no new claims, a grace period, unfinished claims handed back, nothing lost after restart', async () => {
    await enqueueFromAnotherProcess(database, MESSAGES, {}, { deploy: true })
    const effects = sideEffectsFile()
    // Half of the messages take 300 ms, the other half 30 s unless their signal aborts; the lease stays at 1 h, so
    // only the hand-back (not an expired lease) makes their messages available again.
    const first = await startInstance(database, {
      name: 'A',
      queue: { concurrency: 50, chunkSize: 50, shutdownGrace: '2s', pollInterval: '500ms' },
      env: { HANDLER_MS: '300', SLOW_EVERY: '2', SLOW_MS: '30000', SIDE_EFFECTS: effects, CDS_LOG_LEVELS_QUEUE: 'info' }
    })
    running.push(first)
    await waitFor(async () => (await counts(query)).processing === 50, { what: '50 handlers in flight' })
    const claimed = new Set((await query(`SELECT ID AS "ID" FROM cds_outbox_messages WHERE status = 'processing'`)).map(r => r.ID))
    const signalled = Date.now()
    await stopInstance(first, 30000)
    const exitedAfterMs = Date.now() - signalled
    const after = await counts(query)
    // no new claims after the signal, the slow ones were aborted and handed back: nothing processing, all due now
    expect([...sideEffects(effects).keys()].filter(ID => !claimed.has(ID))).toEqual([])
    expect(after.processing).toBe(0)
    expect(after.pending + after.handled).toBe(MESSAGES)
    const [{ due }] = await query(`SELECT CAST(COUNT(*) AS INTEGER) AS "due" FROM cds_outbox_messages WHERE dueAt <= now() + interval '1 second'`)
    expect(Number(due)).toBe(after.pending)
    // the log tells the truth: one message per slot here, each still running or handed back by its aborted handler
    const [, stillRunning] = first.output.match(/(\d+) handlers still running after the shutdown grace period of 2000 ms: aborting them and handing back their messages\n/)
    const [, released, , others] = first.output.match(/handed back (\d+) messages \(\1 of running handlers, 0 not started\)(; (\d+) were no longer claimed by this process)?/)
    expect(Number(released) + Number(others ?? 0)).toBe(Number(stillRunning))

    const restartedAt = Date.now()
    running.push(await startInstance(database, { name: 'B', queue: { concurrency: 50 } }))
    const final = await drained(query, MESSAGES, 60000)
    expect(final).toEqual({ pending: 0, processing: 0, dead: 0, runs: MESSAGES, handled: MESSAGES })
    console.log('graceful shutdown:', JSON.stringify({
      inFlightAtSignal: 50, handledBeforeRestart: after.handled, handedBack: after.pending, exitedAfterMs,
      restartToDrainedMs: Date.now() - restartedAt
    }))
  })
})
