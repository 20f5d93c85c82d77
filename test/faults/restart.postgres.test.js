const { haltServer, restartServer } = require('../support/postgres')
const { startInstance, enqueueFromAnotherProcess } = require('../support/instances')
const { privatePostgres, counts } = require('../support/faults')
const { waitFor } = require('../support/wait')

const MESSAGES = 3000
const RESTARTS = 5

/**
 * A PostgreSQL restart (fast shutdown) ends the sessions of connections that are still being set up, too. The app's
 * pool here drops every connection idle for a few ms, so it opens new ones all the time while it drains: some restart
 * hits one between its handshake and its first use. That connection's failure must fail only the statement that
 * wanted it, not end `cds serve` (pg emits it as an 'error' event of the client).
 */
describe('faults: PostgreSQL restarts while the pool opens connections', () => {
  const pg = privatePostgres()

  test(`${RESTARTS} restarts while connections are being created: the process keeps serving and drains every message`, async () => {
    await enqueueFromAnotherProcess(pg.db, MESSAGES, {}, { deploy: true })
    // generic-pool evicts connections idle for 5 ms every 5 ms: each batch of handlers creates its connections anew
    const churning = { ...pg.db, pool: { min: 0, max: 10, idleTimeoutMillis: 5, evictionRunIntervalMillis: 5 } }
    const queue = { timeout: '3s', concurrency: 10, pollInterval: '200ms' }
    const child = await startInstance(churning, { name: 'A', queue, env: { CDS_LOG_LEVELS_QUEUE: 'info', RECORDS_BY: 'cql' } })
    pg.running.push(child)
    // cds serve logs an uncaught error, then shuts down (exit code 0)
    const alive = () => ({ exitCode: child.exitCode, uncaught: child.output.match(/Uncaught .*/g) ?? [] })
    for (let restart = 1; restart <= RESTARTS; restart++) {
      // restart mid-drain, each time once the process handled more since the last one (it recovered)
      const { handled } = await counts(pg.query)
      await waitFor(async () => child.exitCode !== null || (await counts(pg.query)).handled > handled, { timeout: 60000, what: `progress before restart ${restart}` })
      expect(alive()).toEqual({ exitCode: null, uncaught: [] })
      await haltServer(pg.server)
      await restartServer(pg.server)
    }
    // the drain, or the process's end (then its output says why)
    const final = await waitFor(async () => {
      const c = await counts(pg.query)
      return child.exitCode !== null || (c.pending === 0 && c.handled >= MESSAGES && c)
    }, { timeout: 300000, interval: 200, what: `${MESSAGES} handled messages and an empty queue` })
    expect(alive()).toEqual({ exitCode: null, uncaught: [] })
    expect(final).toEqual({ pending: 0, processing: 0, dead: 0, runs: MESSAGES, handled: MESSAGES })
    // still serving HTTP
    expect((await fetch(`${child.url}/`)).status).toBeLessThan(500)
  }, 600000)
})
