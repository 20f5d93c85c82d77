const { startApp, onPortableStore } = require('../support/app')
const { withClient } = require('../support/postgres')
const { MESSAGES, capRow } = require('../support/outbox')
const cds = require('@sap/cds')

// Polling only every hour: the test drives every pass with cds.flush().
const test$ = startApp({ requires: { queue: { pollInterval: '1h' } } })

/**
 * The portable store has no advisory locks: a claim elsewhere that decided about a key from an older snapshot is seen
 * through the row it holds locked (lib/store/portable.ts, keysStillFree). The native store's advisory locks are
 * tested by the multi-instance ordering suite.
 */
;(onPortableStore() ? describe : describe.skip)('postgres, portable store: ordering keys against claims elsewhere', () => {
  let srv
  const seen = []

  beforeAll(async () => {
    srv = await cds.connect.to('Target')
    srv.on('keyed', req => void seen.push(req.data.seq))
  })

  test('while another transaction holds a later row of a key locked, the key waits; once it ends, the key runs in order', async () => {
    const row = seq => ({ ...capRow({ event: 'keyed', data: { seq } }), orderingKey: 'k1', timestamp: new Date(Date.now() - 2000 + seq * 1000).toISOString() })
    const head = row(0)
    const later = row(1)
    await INSERT.into(MESSAGES).entries([head, later])
    await withClient(async client => {
      await client.query('BEGIN')
      // what a claim elsewhere holds while it decides that `later` is the first of its key (an older snapshot)
      await client.query('SELECT id FROM cds_outbox_messages WHERE id = $1 FOR UPDATE', [later.ID])
      await cds.flush()
      const rows = await SELECT.from(MESSAGES).columns('ID', 'status').orderBy('timestamp')
      expect(rows).toEqual([{ ID: head.ID, status: null }, { ID: later.ID, status: null }])
      expect(seen).toEqual([])
      await client.query('ROLLBACK')
    }, test$.database)
    await cds.flush()
    expect(seen).toEqual([0, 1])
    expect(await SELECT.from(MESSAGES)).toEqual([])
  })
})
