const { startApp } = require('../support/app')
const { MESSAGES, capRow } = require('../support/outbox')
const { waitFor } = require('../support/wait')
const cds = require('@sap/cds')

// One slot and batches of up to 50: a backlog runs in one transaction, a savepoint around each message.
startApp({ requires: { queue: { pollInterval: '1h', concurrency: 1, batchSize: 50 } } })

/**
 * Handlers that are correct alone — and under CAP's built-in queue — stay correct in a batch: one that opens a
 * transaction of its own (cds.tx) or spawns one (cds.spawn). On SQLite the batch holds the database's only pooled
 * connection, which such a transaction waits for.
 */
describe('batches and handlers that open transactions of their own', () => {
  let srv
  const own = () => SELECT.from('Target.Records').where({ kind: 'own' })
  beforeAll(async () => {
    srv = await cds.connect.to('Target')
    // Correct alone and under CAP's queue: its own transaction comes before the message's first statement. (On SQLite
    // one that awaits it after writing in its message's transaction waits for the only connection either way.)
    srv.on('ownTx', async req => {
      await cds.tx({}, tx => tx.run(INSERT.into('Target.Records').entries({ ID: cds.utils.uuid(), kind: 'own', message: String(req.data.n) })))
      await INSERT.into('Target.Records').entries({ ID: cds.utils.uuid(), kind: 'in-message', message: String(req.data.n) })
    })
    srv.on('spawns', req => {
      cds.spawn({}, () => INSERT.into('Target.Records').entries({ ID: cds.utils.uuid(), kind: 'own', message: String(req.data.n) }))
    })
  })
  afterEach(async () => {
    await DELETE.from(MESSAGES)
    await DELETE.from('Target.Records')
  })

  test('a handler awaiting a cds.tx of its own in a batch neither hangs nor runs twice', async () => {
    const rows = Array.from({ length: 10 }, (_, n) => capRow({ event: 'ownTx', data: { n } }))
    await INSERT.into(MESSAGES).entries(rows)
    await cds.flush()
    expect(await SELECT.from(MESSAGES)).toEqual([])
    const sorted = records => records.map(r => Number(r.message)).sort((a, b) => a - b)
    expect(sorted(await own())).toEqual([...Array(10).keys()])
    expect(sorted(await SELECT.from('Target.Records').where({ kind: 'in-message' }))).toEqual([...Array(10).keys()])
  }, 20000)

  test('a handler that spawns a transaction in a batch: every spawned transaction runs once', async () => {
    const rows = Array.from({ length: 10 }, (_, n) => capRow({ event: 'spawns', data: { n } }))
    await INSERT.into(MESSAGES).entries(rows)
    await cds.flush()
    const written = await waitFor(async () => {
      const r = await own()
      return r.length >= 10 && r
    }, { what: 'ten spawned transactions' })
    expect(written.map(r => Number(r.message)).sort((a, b) => a - b)).toEqual([...Array(10).keys()])
  }, 20000)
})
