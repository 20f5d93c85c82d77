const { startApp } = require('../support/app')
const { waitFor } = require('../support/wait')
const cds = require('@sap/cds')

// Everything the plugin logs, from before the app starts: a newcomer's app served before `cds deploy`.
const logged = []
for (const level of ['error', 'warn', 'info']) {
  jest.spyOn(console, level).mockImplementation((...args) => void logged.push(args.map(a => (a instanceof Error ? a.stack : String(a))).join(' ')))
}
afterAll(() => jest.restoreAllMocks())

const app = startApp({ log: { levels: { queue: 'info' } } }, { deploy: false })

const queueLines = () => logged.filter(line => line.startsWith('[queue]'))

describe('an app served before cds deploy', () => {
  test('says once that the queue table is missing, without a stack trace, and health names it; after cds deploy it works', async () => {
    // the runner claims, reconciles, creates indexes, reads controls and statistics, and the ops page samples the lag
    // (probes that wait long: one timing out on the loaded machine would be a failure of its own, logged with its stack)
    const health = await waitFor(async () => {
      const h = await cds.queued.health({ timeout: '30s' })
      return h.checks.claims.failures >= 3 && h
    }, { timeout: 30000, what: 'three failed claims' })
    const { host, port } = cds.env.requires.db.credentials
    const where = app.database ? `PostgreSQL database ${app.database} on ${host}:${port}` : `SQLite database ${app.dbFile}`
    const line = `table cds_outbox_Messages missing in ${where}: run cds deploy`
    // no stack trace, nor the database's own error printed some other way
    expect(queueLines().filter(l => /\n\s+at |no such table|does not exist/.test(l)).map(l => l.split('\n')[0])).toEqual([])
    // one line for the database, naming the first of the plugin's missing tables a path ran into: usually the
    // queue's; CI once saw cds_outbox_Receipts first (postgres-portable, under its CPU contention)
    const missing = queueLines().filter(l => /missing/.test(l))
    expect(missing).toHaveLength(1)
    expect(missing[0].replace(/^\[queue\] - table cds_outbox_\w+ /, '[queue] - table cds_outbox_Messages ')).toBe(`[queue] - ${line}`)
    expect(health.status).toBe('DOWN')
    expect(health.checks.database).toEqual({ status: 'DOWN', error: 'TABLE_MISSING', reason: line })

    await cds.deploy('*').to(cds.db)
    const srv = await cds.connect.to('Target')
    const done = new Promise(resolve => srv.on('after-deploy', resolve))
    await cds.queued(srv).emit('after-deploy', {})
    await done
    await waitFor(async () => (await cds.queued.health({ timeout: '30s' })).status === 'UP', { timeout: 30000, what: 'the queue UP again' })
  })
})
