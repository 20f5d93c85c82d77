const { startApp } = require('../support/app')
const { MESSAGES, capRow } = require('../support/outbox')
const cds = require('@sap/cds')

// One slot and batches of up to 50: a backlog runs in one transaction, a savepoint around each message.
startApp({ requires: { queue: { pollInterval: '1h', concurrency: 1, batchSize: 50, backoff: { base: '1h' } } } })

describe('postgres: a handler that catches its own database error in a batch', () => {
  let srv
  beforeAll(async () => {
    srv = await cds.connect.to('Target')
    srv.on('write', async req => {
      if (req.data.clash) {
        // a handler that expects a duplicate key sometimes and carries on: PostgreSQL has aborted its transaction
        try {
          await INSERT.into('Target.Records').entries({ ID: req.data.clash, kind: 'clash' })
        } catch {
          /* deliberately ignored by the handler */
        }
        return
      }
      await INSERT.into('Target.Records').entries({ ID: cds.utils.uuid(), kind: 'batched', message: String(req.data.n) })
    })
  })

  test('fails that message alone: its neighbours in the batch commit, and it is retried later', async () => {
    const existing = cds.utils.uuid()
    await INSERT.into('Target.Records').entries({ ID: existing, kind: 'existing' })
    const rows = Array.from({ length: 10 }, (_, n) => capRow({ event: 'write', data: n === 4 ? { clash: existing } : { n } }))
    await INSERT.into(MESSAGES).entries(rows)
    await cds.flush()
    const written = await SELECT.from('Target.Records').where({ kind: 'batched' })
    expect(written.map(r => Number(r.message)).sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 5, 6, 7, 8, 9])
    const left = await SELECT.from(MESSAGES)
    expect(left).toMatchObject([{ ID: rows[4].ID, attempts: 1 }])
    expect(left[0].lastError).toMatch(/aborted|25P02/)
  })
})
