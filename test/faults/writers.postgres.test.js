const { haltServer, restartServer } = require('../support/postgres')
const { startInstance, enqueueFromAnotherProcess } = require('../support/instances')
const { privatePostgres, counts, drained } = require('../support/faults')
const { OPERATOR_USERS } = require('../support/operators')
const { waitFor, sleep } = require('../support/wait')

const MESSAGES = 1000
const RESTARTS = 5
const OPS = `Basic ${Buffer.from('ops:ops').toString('base64')}`

/**
 * Issue 32, item 3: no process dies of a database outage, whoever writes. PostgreSQL restarts (fast shutdown) while
 * the app's handlers write with CQL INSERT in batches, the runner claims and records outcomes, inbound events are
 * written to the inbox and its receipts, and an operator calls the operator service. The process must keep serving
 * and apply every message and every event it accepted once.
 */
describe('faults: PostgreSQL restarts while every writer writes', () => {
  const pg = privatePostgres()

  test(`${RESTARTS} restarts beside handlers in batches, claims, the inbox and its receipts, the operator service: the process survives and applies each once`, async () => {
    await enqueueFromAnotherProcess(pg.db, MESSAGES, {}, { deploy: true })
    const queue = { timeout: '3s', concurrency: 5, pollInterval: '200ms', batchSize: 10 }
    const requires = { auth: { kind: 'mocked', users: OPERATOR_USERS } }
    const child = await startInstance(pg.db, { name: 'A', queue, requires, env: { HANDLER_MS: '5', CDS_LOG_LEVELS_QUEUE: 'info', RECORDS_BY: 'cql' } })
    pg.running.push(child)
    const alive = () => ({ exitCode: child.exitCode, uncaught: child.output.match(/Uncaught .*/g) ?? [] })

    // Beside the drain: inbound events, each delivered twice (a broker's redelivery), and an operator's calls.
    let writing = true
    const accepted = new Set()
    const operatorAnswers = new Map()
    const post = (path, body, headers = {}) =>
      fetch(`${child.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) })
        .then(res => res.status, () => 'refused')
    const inboundAnswers = new Map()
    const inbound = (async () => {
      for (let n = 0; writing; n++) {
        for (const delivery of [1, 2]) {
          const status = await post('/inbound', { id: `event-${n}` })
          inboundAnswers.set(status, (inboundAnswers.get(status) ?? 0) + 1)
          if (status === 200) accepted.add(`event-${n}`)
        }
        await sleep(10) // pacing: a broker's stream of events, not a busy loop
      }
    })()
    const operator = (async () => {
      while (writing) {
        const status = await post('/odata/v4/event-queues/reviveAll', {}, { authorization: OPS })
        operatorAnswers.set(status, (operatorAnswers.get(status) ?? 0) + 1)
        await sleep(50)
      }
    })()

    try {
      for (let restart = 1; restart <= RESTARTS; restart++) {
        // restart each time once the process recovered: it handled messages (or all of them) and accepted events since the last
        const { handled } = await counts(pg.query)
        const events = accepted.size
        const progressed = count => count > handled || count === MESSAGES
        const recovered = async () => progressed((await counts(pg.query)).handled) && accepted.size >= events + 10
        await waitFor(async () => child.exitCode !== null || (await recovered()), { timeout: 60000, what: `progress before restart ${restart}` })
        expect(alive()).toEqual({ exitCode: null, uncaught: [] })
        await haltServer(pg.server)
        await restartServer(pg.server)
      }
    } finally {
      writing = false
      await Promise.all([inbound, operator])
    }
    const final = await drained(pg.query, MESSAGES, 300000)
    expect(alive()).toEqual({ exitCode: null, uncaught: [] })
    expect(final).toEqual({ pending: 0, processing: 0, dead: 0, runs: MESSAGES, handled: MESSAGES })
    // every event the app accepted (either delivery answered 200) applied once; one it only answered with an error at
    // most once (its commit may have landed)
    const applied = await pg.query(`SELECT message AS "id", CAST(COUNT(*) AS INTEGER) AS "n" FROM test_Records WHERE kind = 'inbound' GROUP BY message`)
    const appliedOnce = new Set(applied.filter(row => Number(row.n) === 1).map(row => row.id))
    expect(applied.filter(row => Number(row.n) > 1)).toEqual([])
    expect([...accepted].filter(id => !appliedOnce.has(id))).toEqual([])
    // the operator service answered between the restarts too, and the app still serves
    expect(operatorAnswers.get(200)).toBeGreaterThan(0)
    expect((await fetch(`${child.url}/`)).status).toBeLessThan(500)
    console.log('PostgreSQL restarts beside every writer:', JSON.stringify({
      inboundAccepted: accepted.size, inboundApplied: applied.length, inboundAnswers: Object.fromEntries(inboundAnswers),
      operatorAnswers: Object.fromEntries(operatorAnswers)
    }))
  }, 600000)
})
