/**
 * `node bench/held.js` (part of `npm run bench`): what messages held back behind their ordering key cost everybody
 * else. A key's head waits for its retry a day away; BENCH_HELD messages of that key (default "0,10000,100000") were
 * queued behind it through the API. Measured, per database and held count, in a fresh process each:
 * - a claim that finds nothing due (what every poll and wake-up of every instance runs), median of 50;
 * - commit → handler of a fresh message of another key (a claim path: keyed messages are never claimed at enqueue),
 *   median of 100.
 * With BENCH_IMPORTED=1 the held-back messages are written by someone else instead (a bulk import: CQL rows in CAP's
 * format with the key filled in, the plugin's other columns at their defaults; on PostgreSQL analyzed, as autovacuum
 * does soon after), and one reconciliation (`cds.flush()`) runs before the measurements.
 * With BENCH_BASELINE (a built copy of another version inside this repository, see bench/run.js) the same runs on it,
 * alternately. It measures; it does not pass or fail. BENCH_DBS ("sqlite,postgres"), BENCH_REPS (1).
 */
const path = require('path')

const config = {
  held: (process.env.BENCH_HELD ?? '0,10000,100000').split(',').map(Number),
  reps: Number(process.env.BENCH_REPS ?? 1),
  dbs: (process.env.BENCH_DBS ?? 'sqlite,postgres').split(','),
  claims: 50,
  samples: 100,
  imported: process.env.BENCH_IMPORTED === '1'
}
const log = (...args) => console.error('[bench:held]', ...args)

/** Child: queues the held-back backlog, then measures claims and commit → handler. */
async function child() {
  setInterval(() => {}, 60_000) // keep alive until the figures are sent
  const { REPO, boot, serve, impl } = require('./support/app')
  const { MESSAGES, now, wallClock } = require('./support/messages')
  const { median } = require('./support/stats')
  const { cds, srv, queued } = await boot()
  const held = Number(process.env.BENCH_HELD_COUNT)
  let probed
  srv.on('noop', req => req.data.probe !== undefined && probed?.(wallClock()))
  await serve(cds)

  const msg = JSON.stringify({ 'cds.internal.user': 'anonymous', service: 'Bench', context: {}, event: 'noop', data: {}, headers: {} })
  const past = new Date(Date.now() - 60_000).toISOString()
  const tomorrow = new Date(Date.now() + 86_400_000).toISOString()
  await INSERT.into(MESSAGES).entries({ ID: cds.utils.uuid(), timestamp: past, target: 'queue', msg, attempts: 1, dueAt: tomorrow, orderingKey: 'held' })
  if (config.imported) await imported(cds, MESSAGES, msg, held)
  else {
    for (let done = 0; done < held; done += 1000) {
      await cds.tx(async () => {
        for (let n = done; n < Math.min(held, done + 1000); n++) await queued.emit('noop', { n }, { 'x-ordering-key': 'held' })
      })
    }
  }

  const plugin = impl() === 'baseline' ? path.resolve(process.env.BENCH_BASELINE) : REPO
  const { runner } = require(path.join(plugin, 'lib', 'plugin')).eventQueues()
  const claims = []
  for (let i = 0; i < config.claims; i++) {
    const start = now()
    await cds.tx(() => runner.store.claim('bench', Date.now(), Date.now() + 60_000, 10))
    claims.push(now() - start)
  }
  const latencies = []
  for (let i = 0; i < config.samples; i++) {
    let committedAt
    const seen = new Promise(resolve => (probed = resolve))
    await cds.tx(async () => {
      // registered before the emit, so it runs before the queue's own 'succeeded' listener: the commit instant
      cds.context.on('succeeded', () => (committedAt = wallClock()))
      await queued.emit('noop', { probe: i }, { 'x-ordering-key': `probe-${i}` })
    })
    latencies.push((await seen) - committedAt)
  }
  await new Promise(resolve => process.send({ claim: median(claims), latency: median(latencies) }, resolve))
}

/** `count` rows of the held key written by others (BENCH_IMPORTED), then one reconciliation. */
async function imported(cds, MESSAGES, msg, count) {
  for (let done = 0; done < count; done += 1000) {
    const entries = []
    for (let n = done; n < Math.min(count, done + 1000); n++) entries.push({ ID: cds.utils.uuid(), timestamp: new Date().toISOString(), target: 'queue', msg, orderingKey: 'held' })
    await INSERT.into(MESSAGES).entries(entries)
  }
  if (cds.db.kind === 'postgres') await cds.db.run('ANALYZE cds_outbox_Messages')
  await cds.flush()
}

async function parent() {
  const { withServer, perVersion } = require('./support/versions')
  const { median } = require('./support/stats')
  const rows = await withServer(config.dbs, async server => {
    const rows = []
    for (const kind of config.dbs) {
      for (const held of config.held) {
        const results = await perVersion({
          script: 'held.js', kind, server, reps: config.reps, env: { BENCH_HELD_CHILD: 'yes', BENCH_HELD_COUNT: String(held) },
          seen: (impl, rep, r) => log(kind, impl, `${held} held, rep ${rep + 1}:`, `claim ${r.claim.toFixed(2)} ms,`, `commit → handler ${r.latency.toFixed(2)} ms`)
        })
        for (const [impl, runs] of results) rows.push(`| ${kind} | ${impl} | ${held} | ${median(runs.map(r => r.claim)).toFixed(2)} | ${median(runs.map(r => r.latency)).toFixed(2)} |`)
      }
    }
    return rows
  })
  console.log(`Messages ${config.imported ? 'others wrote' : 'held back'} behind one key's head (median of ${config.reps} process${config.reps > 1 ? 'es' : ''}):\n`)
  console.log('| database | version | held back | claim finding nothing (ms) | commit → handler, another key (ms) |\n|---|---|---|---|---|')
  console.log(rows.join('\n'))
}

require('./support/processes').runScript('BENCH_HELD_CHILD', child, parent)
