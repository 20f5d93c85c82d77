const { startApp, onPostgres } = require('../support/app')
const { MESSAGES, capRow } = require('../support/outbox')
const { waitFor } = require('../support/wait')
const { eventQueues } = require('../../lib/plugin')
const cds = require('@sap/cds')

// The statistics behind the lag check are read at most once a second here.
const app = startApp({ requires: { queue: { statisticsInterval: '1s' } } })

const iso = ms => new Date(ms).toISOString()

/** A message of queue `target` enqueued `ago` ms ago and waiting for its next attempt in an hour: it lags `ago`. */
function waiting(target, ago) {
  const now = Date.now()
  return { ...capRow({ event: 'waiting', target }), timestamp: iso(now - ago), attempts: 1, lastAttemptTimestamp: iso(now), dueAt: iso(now + 3_600_000) }
}

describe('health', () => {
  afterEach(() => DELETE.from(MESSAGES))

  test('once the app runs, the queue is UP: runner started, database answering, the last claim succeeded', async () => {
    await waitFor(async () => (await cds.queued.health()).checks.claims.lastSucceededAt !== null, { what: 'a first claim' })
    const health = await cds.queued.health()
    expect(health).toMatchObject({
      status: 'UP',
      checks: { runner: { status: 'UP' }, database: { status: 'UP' }, claims: { status: 'UP', failures: 0 } }
    })
    expect(health.checks.database.latency).toBeGreaterThanOrEqual(0)
    expect(Date.parse(health.checks.claims.lastSucceededAt)).toBeLessThanOrEqual(Date.now())
    // the lag is checked only when asked for
    expect(health.checks.lag).toBeUndefined()
    expect(cds.outboxed.health).toBe(cds.queued.health)
  })

  test('with maxLag, a queue whose oldest message waits longer makes the queue DOWN, naming the queue and its lag', async () => {
    await INSERT.into(MESSAGES).entries([waiting('lagging', 600_000), waiting('lagging', 60_000), waiting('other', 120_000)])
    // the statistics of the previous second may not have the rows yet
    await waitFor(async () => (await cds.queued.health({ maxLag: '5m' })).status === 'DOWN', { what: 'the lag check to see the rows' })
    const late = await cds.queued.health({ maxLag: '5m' })
    expect(late.checks.lag).toMatchObject({ status: 'DOWN', queue: 'lagging', maxLag: 300 })
    expect(late.checks.lag.relayLag).toBeGreaterThanOrEqual(600)
    expect(late.checks.lag.relayLag).toBeLessThan(660)
    expect(late.checks.database.status).toBe('UP')

    const inTime = await cds.queued.health({ maxLag: '1h' })
    expect(inTime.status).toBe('UP')
    expect(inTime.checks.lag).toMatchObject({ status: 'UP', queue: 'lagging', maxLag: 3600 })
  })

  const onPg = onPostgres() ? test : test.skip
  onPg('a database that does not answer within the timeout is DOWN, named by code only (PostgreSQL)', async () => {
    const { withClient } = require('../support/postgres')
    await withClient(async client => {
      // a migration holding the queue table: every statement on it waits
      await client.query('BEGIN')
      await client.query('LOCK TABLE cds_outbox_Messages IN ACCESS EXCLUSIVE MODE')
      try {
        const health = await cds.queued.health({ timeout: '200ms' })
        expect(health.status).toBe('DOWN')
        expect(health.checks.database).toEqual({ status: 'DOWN', error: 'TIMEOUT' })
      } finally {
        await client.query('ROLLBACK')
      }
    }, app.database)
    await waitFor(async () => (await cds.queued.health()).status === 'UP', { what: 'the queue to be UP again' })
  })

  test('while the queue table is gone, database and claims are DOWN; once it is back, UP again', async () => {
    const away = () => cds.db.run('ALTER TABLE cds_outbox_Messages RENAME TO cds_outbox_Messages_away')
    const back = () => cds.db.run('ALTER TABLE cds_outbox_Messages_away RENAME TO cds_outbox_Messages')
    await waitFor(async () => (await cds.queued.health()).checks.claims.lastSucceededAt !== null, { what: 'a first claim' })
    await away()
    try {
      const down = await waitFor(async () => {
        const health = await cds.queued.health()
        // a probe of the loaded machine may time out instead: the next one answers
        return health.checks.claims.failures > 0 && health.checks.database.error !== 'TIMEOUT' && health
      }, { what: 'a failed claim' })
      expect(down.status).toBe('DOWN')
      // the table is named, as an app served before cds deploy has it named (missing-table.test.js)
      expect(down.checks.database).toEqual({ status: 'DOWN', error: 'TABLE_MISSING', reason: expect.stringMatching(/^table cds_outbox_Messages missing in .+: run cds deploy$/) })
      expect(down.checks.claims).toMatchObject({ status: 'DOWN', lastSucceededAt: expect.any(String) })
    } finally {
      await back()
    }
    // with nothing enqueued meanwhile: the runner's own retry after its backoff claims again
    await waitFor(async () => (await cds.queued.health()).status === 'UP', { what: 'the queue to be UP again' })
  })

  // Last: it stops the runner.
  test('a runner that has stopped is DOWN', async () => {
    await eventQueues().runner.stop()
    const health = await cds.queued.health()
    expect(health.status).toBe('DOWN')
    expect(health.checks.runner).toEqual({ status: 'DOWN' })
    expect(health.checks.database.status).toBe('UP')
  })
})
