/**
 * `node bench/broker-outage.js` (after `npm run build`): what a long broker outage costs the producer app. A
 * `redis-server` (scripts/redis-server.js, stopped by its PID) is stopped; a producer process (the bench app with a
 * `redis-streams` service `broker`, queued by default, the plugin's default queue options) commits
 * BENCH_OUTAGE_EVENTS events (default 100,000) in transactions of 1,000 while Redis is away, and then idles through
 * the rest of the outage (BENCH_OUTAGE_MS, default 10 minutes). Meanwhile it samples, every 5 s, its CPU time (user +
 * system), its RSS and heap, and the queue's rows; after Redis is back the bench reads the stream until every event is
 * there. Reported: the producer's CPU share and memory while idle in the outage, attempts charged and dead letters,
 * and how long after Redis's return the first and the last event reached the stream. BENCH_DBS: "sqlite" (default),
 * "postgres" or both. It measures; it does not pass or fail.
 */
const { freePort } = require('../scripts/local-servers')
const redisServer = require('../scripts/redis-server')
const { environment, boot, serve } = require('./support/app')
const { newDatabase } = require('./support/databases')
const { start, stop, nextMessage, runScript } = require('./support/processes')

const EVENTS = Number(process.env.BENCH_OUTAGE_EVENTS ?? 100_000)
const OUTAGE = Number(process.env.BENCH_OUTAGE_MS ?? 600_000)
const PER_TX = 1000
const SAMPLE_MS = 5000
const TOPIC = 'outage/events'
const log = (...args) => console.error('[bench:broker-outage]', ...args)

/** Child: the producer. Commits the events on 'emit', then reports samples until it is stopped. */
async function child() {
  setInterval(() => {}, 60_000)
  const { cds } = await boot()
  const broker = await cds.connect.to('broker')
  await serve(cds)
  const rows = async () => {
    const [row] = await cds.tx(() => cds.run('SELECT COUNT(*) AS "n", SUM(attempts) AS "attempts", SUM(CASE WHEN attempts >= 10 THEN 1 ELSE 0 END) AS "dead" FROM cds_outbox_Messages'))
    return { rows: Number(row.n), attempts: Number(row.attempts ?? 0), dead: Number(row.dead ?? 0) }
  }
  process.on('message', async m => {
    if (m.emit) {
      for (let n = 0; n < m.emit; n += PER_TX) {
        await cds.tx(async () => {
          for (let i = n; i < Math.min(n + PER_TX, m.emit); i++) await broker.emit(TOPIC, { n: i })
        })
      }
      process.send({ emitted: true })
    }
    if (m.sample) {
      const { user, system } = process.cpuUsage()
      const { rss, heapUsed } = process.memoryUsage()
      process.send({ sample: { at: Date.now(), cpu: (user + system) / 1000, rss, heapUsed, ...(m.rows ? await rows() : {}) } })
    }
  })
  process.send({ ready: true })
  await new Promise(() => {}) // until the bench stops this process
}

async function measure(kind, server) {
  const redis = await redisServer.startServer({ port: await freePort() })
  const { db, cleanup } = await newDatabase(kind, server)
  const broker = { kind: 'redis-streams', credentials: { uri: redis.url } }
  // the plugin's defaults but for the poll interval, which the bench app sets to 1 h
  const producer = start('broker-outage.js', environment('plugin', db, { BENCH_OUTAGE_CHILD: '1' }, { queue: { pollInterval: '5s' }, requires: { broker } }))
  const client = require('redis').createClient({ url: redis.url })
  client.on('error', () => {})
  try {
    await nextMessage(producer, m => m.ready)
    await client.connect()
    await redisServer.haltServer(redis)
    const stoppedAt = Date.now()
    producer.send({ emit: EVENTS })
    await nextMessage(producer, m => m.emitted)
    const emittedMs = Date.now() - stoppedAt
    log(`${kind}: ${EVENTS} events committed ${emittedMs} ms into the outage; idling until ${OUTAGE / 1000} s`)
    const samples = []
    const sample = async rows => {
      producer.send({ sample: true, rows })
      samples.push((await nextMessage(producer, m => m.sample)).sample)
    }
    // the first sample after a settling pause: the enqueue's own work is over
    await new Promise(resolve => setTimeout(resolve, SAMPLE_MS))
    while (Date.now() - stoppedAt < OUTAGE) {
      await sample(samples.length % 12 === 0)
      await new Promise(resolve => setTimeout(resolve, SAMPLE_MS))
    }
    await sample(true)
    await redisServer.restartServer(redis)
    const restartedAt = Date.now()
    let firstAt
    for (;;) {
      const length = Number(await client.sendCommand(['XLEN', TOPIC]).catch(() => 0))
      if (length > 0) firstAt ??= Date.now()
      if (length >= EVENTS) break
      if (Date.now() - restartedAt > 600_000) throw new Error(`only ${length} of ${EVENTS} events in the stream 10 min after Redis's return`)
      await new Promise(resolve => setTimeout(resolve, 50))
    }
    const lastAt = Date.now()
    const idle = samples
    const cpuMs = idle[idle.length - 1].cpu - idle[0].cpu
    const wallMs = idle[idle.length - 1].at - idle[0].at
    const mb = bytes => Math.round(bytes / 1024 / 1024)
    const withRows = idle.filter(s => s.rows !== undefined)
    const figures = {
      db: kind,
      events: EVENTS,
      outageS: Math.round((restartedAt - stoppedAt) / 1000),
      committedWithinS: Math.round(emittedMs / 1000),
      idleCpuPercent: Number(((cpuMs / wallMs) * 100).toFixed(2)),
      rssMb: { first: mb(idle[0].rss), max: mb(Math.max(...idle.map(s => s.rss))), last: mb(idle[idle.length - 1].rss) },
      heapMb: { first: mb(idle[0].heapUsed), max: mb(Math.max(...idle.map(s => s.heapUsed))), last: mb(idle[idle.length - 1].heapUsed) },
      rowsAtEnd: withRows[withRows.length - 1].rows,
      attemptsCharged: Math.max(...withRows.map(s => s.attempts)),
      deadLetters: Math.max(...withRows.map(s => s.dead)),
      firstEventAfterReturnMs: firstAt - restartedAt,
      allEventsAfterReturnMs: lastAt - restartedAt
    }
    console.log(JSON.stringify(figures))
    return figures
  } finally {
    client.destroy()
    await stop(producer)
    await redisServer.stopServer(redis)
    await cleanup()
  }
}

async function parent() {
  const kinds = (process.env.BENCH_DBS ?? 'sqlite').split(',')
  const postgres = require('./support/postgres')
  const server = kinds.includes('postgres') ? await postgres.startServer() : undefined
  try {
    for (const kind of kinds) await measure(kind, server)
  } finally {
    if (server) await postgres.stopServer(server)
  }
}

runScript('BENCH_OUTAGE_CHILD', child, parent)
