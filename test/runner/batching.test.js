const { startApp, merge, onPostgres } = require('../support/app')
const { runCli } = require('../support/cli')
const { MESSAGES, messages, capRow } = require('../support/outbox')
const { waitFor, sleep } = require('../support/wait')
const { readThenAwaitRemote } = require('../support/remote-call')
const cds = require('@sap/cds')

startApp({ requires: { queue: { batchSize: 10, pollInterval: '1h', backoff: { base: 60_000, max: 60_000 } } } })

describe('batched processing (batchSize > 1)', () => {
  let srv
  const runs = []
  const succeeded = []
  const failed = []
  beforeAll(async () => {
    srv = await cds.connect.to('Target')
    srv.on('record', async req => {
      const { tag, fail } = req.data
      const { user, id } = cds.context
      runs.push({ tag, user: user.id, correlation: id, headers: req.headers, messageId: req.queue.messageId, attempt: req.queue.attempt })
      req.on('succeeded', () => succeeded.push(tag))
      req.on('failed', () => failed.push(tag))
      await INSERT.into('test.Records').entries({ ID: cds.utils.uuid(), kind: 'batch', message: tag })
      if (fail === 'poison') throw new TypeError(`${tag} is a programming error`)
      if (fail) throw new Error(`${tag} fails after writing`)
    })
  })
  afterEach(async () => {
    await DELETE.from(MESSAGES)
    await DELETE.from('test.Records')
    runs.length = succeeded.length = failed.length = 0
  })

  /** Rows written without a wake-up: the next flush() claims them all at once, so they run as one batch. */
  async function backlog(entries) {
    const rows = entries.map(e => capRow({ event: 'record', ...e }))
    await INSERT.into(MESSAGES).entries(rows)
    await cds.flush()
    return rows
  }
  const written = async () => (await SELECT.from('test.Records').columns('message')).map(r => r.message).sort()

  test('a failing handler rolls back only its own writes; the others commit together with the deletion of their rows', async () => {
    const rows = await backlog(['a', 'b', 'c', 'd', 'e'].map(tag => ({ data: { tag, fail: tag === 'c' } })))
    expect(runs.map(r => r.tag).sort()).toEqual(['a', 'b', 'c', 'd', 'e'])
    expect(await written()).toEqual(['a', 'b', 'd', 'e'])
    const left = await messages()
    expect(left.map(r => r.ID)).toEqual([rows[2].ID])
    expect(left[0]).toMatchObject({ attempts: 1, lastError: expect.stringContaining('c fails after writing') })
  })

  test('a programming error in one handler makes only that message a dead letter; the rest of its batch commits', async () => {
    const rows = await backlog(['p', 'q', 'r'].map(tag => ({ data: { tag, fail: tag === 'q' && 'poison' } })))
    expect(await written()).toEqual(['p', 'r'])
    const left = await messages()
    expect(left.map(r => r.ID)).toEqual([rows[1].ID])
    expect(left[0]).toMatchObject({ dueAt: null, status: null, lastError: expect.stringContaining('q is a programming error') })
  })

  test("req.on('succeeded') fires for the committed messages of a batch, req.on('failed') for the failed one", async () => {
    await backlog(['a', 'b', 'c'].map(tag => ({ data: { tag, fail: tag === 'b' } })))
    expect(succeeded.sort()).toEqual(['a', 'c'])
    expect(failed).toEqual(['b'])
  })

  test('each message of a batch runs with its own user, correlation id, headers and req.queue', async () => {
    const rows = await backlog([
      { data: { tag: 'x' }, user: 'alice', context: { id: 'corr-x' }, headers: { 'x-tag': 'x' } },
      { data: { tag: 'y' }, user: 'alice', context: { id: 'corr-y' }, headers: { 'x-tag': 'y' } },
      { data: { tag: 'z' }, user: 'bob', context: { id: 'corr-z' }, headers: { 'x-tag': 'z' } }
    ])
    const run = tag => runs.find(r => r.tag === tag)
    for (const [i, tag] of ['x', 'y', 'z'].entries()) {
      expect(run(tag)).toMatchObject({
        user: i < 2 ? 'alice' : 'bob', correlation: `corr-${tag}`, headers: { 'x-tag': tag }, messageId: rows[i].ID, attempt: 1
      })
    }
    expect(await messages()).toHaveLength(0)
  })

  test('a stuck handler holds up only its own message: what its batch has not started goes back to the queue', async () => {
    let open
    const opened = new Promise(resolve => (open = resolve))
    const done = []
    srv.on('wait', async req => {
      if (req.data.stuck) await opened
      done.push(req.data.n)
    })
    // 30 rows over 10 free slots: the stuck one shares its slot's batch with two others.
    await INSERT.into(MESSAGES).entries(Array.from({ length: 30 }, (_, n) => capRow({ event: 'wait', data: { n, stuck: n === 0 } })))
    const flushed = cds.flush()
    try {
      await waitFor(() => done.length === 29, { timeout: 10000, what: 'every message but the stuck one' })
      expect(done).not.toContain(0)
    } finally {
      open()
    }
    await flushed
    expect(done.sort((a, b) => a - b)).toEqual(Array.from({ length: 30 }, (_, n) => n))
    // Handed back, not failed: nobody was charged an attempt for waiting.
    expect(await messages()).toEqual([])
  })

  // The batch's transaction takes SQLite's write lock as it begins: had it only read before its handler awaited, the
  // CLI's commit meanwhile would fail the batch's first write (SQLITE_BUSY_SNAPSHOT), and all its messages with it.
  ;(onPostgres() ? test.skip : test)('a batch whose handler read and awaits a remote call loses nothing to a CLI write meanwhile (SQLite)', async () => {
    const { attempts, read, answer } = readThenAwaitRemote(srv, 'remote', 'batch')
    const dead = { ...capRow({ event: 'record', data: { tag: 'dead' } }), attempts: 10 }
    // 12 rows over 10 free slots: batches of two
    await INSERT.into(MESSAGES).entries([dead, ...Array.from({ length: 12 }, (_, n) => capRow({ event: 'remote', data: { n } }))])
    const flushed = cds.flush()
    await read
    // the CLI may wait for the batch's transaction up to 30 s; the remote call answers once the CLI is done, or after
    // 8 s (part of the scenario: a slow remote system)
    const config = merge(JSON.parse(process.env.CDS_CONFIG), { requires: { db: { client: { timeout: 30000 } } } })
    const cli = runCli(['delete', dead.ID], { env: { CDS_CONFIG: JSON.stringify(config) } })
    await Promise.race([cli, sleep(8000)])
    answer()
    expect(await cli).toMatchObject({ code: 0, stdout: 'Deleted 1 dead letter.\n' })
    await flushed
    expect(await messages()).toEqual([])
    expect(attempts).toEqual(Array(12).fill(1))
    expect(await SELECT.from('test.Records').where({ kind: 'batch' })).toHaveLength(12)
  })
})
