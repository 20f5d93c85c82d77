const { haltServer, restartServer } = require('../support/postgres')
const { startInstance, enqueueFromAnotherProcess } = require('../support/instances')
const { privatePostgres, counts, drained } = require('../support/faults')
const { waitFor, sleep } = require('../support/wait')

const MESSAGES = 2000
const OUTAGE = 5000

// A server of its own: stopping it must not disturb the other suites' databases.
describe('faults: PostgreSQL outage', () => {
  const pg = privatePostgres()

  test('the database stops for 5 s mid-drain: instances log it, back off, recover without restart, lose nothing', async () => {
    await enqueueFromAnotherProcess(pg.db, MESSAGES, {}, { deploy: true })
    const queue = { timeout: '3s', concurrency: 5, pollInterval: '500ms' }
    // the handlers write their records with CQL INSERT, as an app does (test/support/counting.js)
    const env = { HANDLER_MS: '40', CDS_LOG_LEVELS_QUEUE: 'info', RECORDS_BY: 'cql' }
    for (const name of ['A', 'B']) pg.running.push(await startInstance(pg.db, { name, queue, env: { ...env } }))
    await waitFor(async () => (await counts(pg.query)).handled >= MESSAGES / 5, { timeout: 60000, what: 'a fifth of the drain' })
    const before = await counts(pg.query)
    await haltServer(pg.server)
    const down = Date.now()
    await sleep(OUTAGE)
    await restartServer(pg.server)
    const up = Date.now()
    const handledBy = async () =>
      Object.fromEntries((await pg.query(`SELECT note, COUNT(*)::int AS n FROM test_records WHERE kind = 'handled' GROUP BY note`)).map(r => [r.note, r.n]))
    const atRestart = await handledBy()
    const final = await drained(pg.query, MESSAGES)
    const recovered = Date.now()
    const atEnd = await handledBy()
    expect(final).toEqual({ pending: 0, processing: 0, dead: 0, runs: MESSAGES, handled: MESSAGES })
    for (const child of pg.running) {
      // the same processes, never restarted, said what happened (the tail of its output shows why if not)
      expect({ exitCode: child.exitCode, tail: child.exitCode === null ? '' : child.output.slice(-3000) }).toEqual({ exitCode: null, tail: '' })
      // It noticed: a claim, a renewal, an outcome or the reconciliation failed (a slot can hold a batch through the
      // outage and not need to claim; the first statement after it may be any of these).
      expect(child.output).toMatch(/claiming messages failed|could not renew the lease|could not record the outcome|could not reconcile/)
    }
    // Each recovered by itself: it handled messages after the restart.
    const handledAfterRestart = name => (atEnd[name] ?? 0) - (atRestart[name] ?? 0)
    expect(['A', 'B'].filter(name => handledAfterRestart(name) === 0)).toEqual([])
    console.log('PostgreSQL outage:', JSON.stringify({
      handledBeforeOutage: before.handled, outageMs: up - down, drainAfterRestartMs: recovered - up,
      logLines: pg.running.map(c => c.output.split('\n').filter(l => /\[queue\]/.test(l)).length)
    }))
    // on the portable store the drain after the restart took 47-79 s on the shared machine, the whole test 113-164 s,
    // and over 180 s beside another fault suite
  }, 300000)
})
