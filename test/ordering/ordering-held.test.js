const { startApp, onPortableStore, onPostgres } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES, capRow } = require('../support/outbox')
const cds = require('@sap/cds')

// Claims scan the due rows. Messages held back behind their key's head must not be among them, or every claim (each
// poll, each wake-up, each instance) pays for every held message: 10,000 of them made a PostgreSQL claim 77× slower.
startApp({
  requires: {
    queue: { pollInterval: '1h' },
    // A failing head stays in its retry (backoff of a minute) for the whole test.
    Patient: { impl: 'srv/plain-service.js', outboxed: { orderingKey: 'key', backoff: { base: 60000 } } }
  }
})

const HELD = 300
/** Rows a bulk import writes behind a key's head, and unkeyed messages that must not wait for them. */
const IMPORTED = 20000
const UNKEYED = 300
// The portable store keeps held-back messages in the claim's range and checks each candidate's key instead (README,
// Databases): what is tested here of the range is the native store's.
const nativeStoreTest = onPortableStore() ? test.skip : test

describe('messages held back behind their ordering key', () => {
  let patient
  beforeAll(async () => {
    patient = await cds.connect.to('Patient')
  })
  afterEach(async () => {
    await DELETE.from(MESSAGES)
  })

  /** The rows of `key` a claim looking for due rows now reads (the claim checks their key after reading them). */
  const inClaimRange = key => SELECT.one.from(MESSAGES).columns('count(1) as n').where({ orderingKey: key, dueAt: { '<=': new Date().toISOString() } })

  nativeStoreTest('are not among the rows a claim reads, whatever their number; the key still runs in order once its head succeeds', async () => {
    let healthy = false
    const seen = []
    cds.unqueued(patient).on('drain', req => {
      if (req.data.seq === 0 && !healthy) throw new Error('remote system down')
      seen.push(req.data.seq)
    })
    await cds.tx(async () => {
      for (let seq = 0; seq <= HELD; seq++) await patient.emit('drain', { key: 'held', seq })
    })
    const head = await waitFor(() => SELECT.one.from(MESSAGES).where({ orderingKey: 'held', attempts: 1 }), { what: 'the failed head' })
    // the head waits for its retry, its followers for the head: none is due
    expect(Number((await inClaimRange('held')).n)).toBe(0)

    healthy = true
    await UPDATE(MESSAGES).set({ dueAt: new Date().toISOString() }).where({ ID: head.ID })
    await waitFor(async () => { await cds.queued(patient).flush(); return seen.length === HELD + 1 }, { timeout: 60000, what: 'the key to drain' })
    expect(seen).toEqual(Array.from({ length: HELD + 1 }, (_, seq) => seq))
  }, 90000)

  nativeStoreTest('rows others wrote for a key (CAP, scripts, older versions) are held back too once the runner has seen them', async () => {
    cds.unqueued(patient).on('foreign', () => { throw new Error('remote system down') })
    await cds.tx(() => patient.emit('foreign', { key: 'foreign', seq: 0 }))
    await waitFor(() => SELECT.one.from(MESSAGES).where({ orderingKey: 'foreign', attempts: 1 }), { what: 'the failed head' })
    const rows = Array.from({ length: HELD }, (_, seq) => ({ ...capRow({ service: 'Patient', event: 'foreign', data: { key: 'foreign', seq: seq + 1 }, target: 'Patient' }), orderingKey: 'foreign' }))
    await INSERT.into(MESSAGES).entries(rows)
    expect(Number((await inClaimRange('foreign')).n)).toBe(HELD)
    await cds.queued(patient).flush()
    expect(Number((await inClaimRange('foreign')).n)).toBe(0)
  })

  test('tens of thousands of rows others wrote for a key behind a head in backoff are all held back at one reconciliation; unkeyed messages run meanwhile', async () => {
    const keyed = []
    let unkeyed = 0
    cds.unqueued(patient).on('bulk', req => {
      if (req.data.key === undefined) return void unkeyed++
      keyed.push(req.data.seq)
      throw new Error('remote system down')
    })
    await cds.tx(() => patient.emit('bulk', { key: 'imported', seq: 0 }))
    await waitFor(() => SELECT.one.from(MESSAGES).where({ orderingKey: 'imported', attempts: 1 }), { what: 'the failed head' })
    // a bulk import, in CAP's format with the key filled in: the plugin's other columns take their defaults (due now)
    const rows = Array.from({ length: IMPORTED }, (_, seq) => ({ ...capRow({ service: 'Patient', event: 'bulk', data: { key: 'imported', seq: seq + 1 }, target: 'Patient' }), orderingKey: 'imported' }))
    await INSERT.into(MESSAGES).entries(rows)
    // what PostgreSQL's autovacuum does within a minute of such a write; with the statistics of the empty table every
    // plan on it reads all rows of the key once per row (see claiming.postgres.test.js, which analyzes the same way)
    if (onPostgres()) await cds.db.run('ANALYZE cds_outbox_Messages')
    await cds.queued(patient).flush()
    if (!onPortableStore()) expect(Number((await inClaimRange('imported')).n)).toBe(0)

    await cds.tx(async () => {
      for (let n = 0; n < UNKEYED; n++) await patient.emit('bulk', { n })
    })
    await waitFor(() => unkeyed === UNKEYED, { timeout: 120000, what: 'the unkeyed messages' })
    // the head may have had its retry meanwhile; nothing of its key ran before it
    expect(keyed.every(seq => seq === 0)).toBe(true)
    expect(Number((await SELECT.one.from(MESSAGES).columns('count(1) as n').where({ orderingKey: 'imported' })).n)).toBe(IMPORTED + 1)
  }, 300000)

  test('a held-back row whose head is gone without the runner seeing it (deleted by a script) runs at the next reconciliation', async () => {
    const seen = []
    let healthy = false
    cds.unqueued(patient).on('orphan', req => {
      if (!healthy) throw new Error('remote system down')
      seen.push(req.data.seq)
    })
    await cds.tx(async () => {
      for (let seq = 0; seq < 3; seq++) await patient.emit('orphan', { key: 'orphaned', seq })
    })
    const head = await waitFor(() => SELECT.one.from(MESSAGES).where({ orderingKey: 'orphaned', attempts: 1 }), { what: 'the failed head' })
    healthy = true
    await DELETE.from(MESSAGES).where({ ID: head.ID })
    await waitFor(async () => { await cds.queued(patient).flush(); return seen.length === 2 }, { what: 'the followers' })
    expect(seen).toEqual([1, 2])
  })
})
