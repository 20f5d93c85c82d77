/**
 * `node bench/enqueue-claimed.js`: what a transaction enqueuing messages due now costs on the fast path, where they
 * are written claimed at enqueue and run right after the commit (lib/runner/reservations.ts). In a fresh process per
 * contender and repetition, alternately: BENCH_SAMPLES transactions each of one `emit` (and of 10 with
 * BENCH_PER_TX=10), each followed by its handler run, beside as many transactions inserting one row of the app's own
 * (the floor of a transaction), in alternating order; medians. With BENCH_BASELINE (a built copy of another version,
 * see bench/run.js) the same runs on it. It measures; it does not pass or fail. BENCH_DBS ("sqlite,postgres"),
 * BENCH_REPS (3).
 */
const config = {
  samples: Number(process.env.BENCH_SAMPLES ?? 300),
  perTx: Number(process.env.BENCH_PER_TX ?? 1),
  reps: Number(process.env.BENCH_REPS ?? 3),
  dbs: (process.env.BENCH_DBS ?? 'sqlite,postgres').split(',')
}
const log = (...args) => console.error('[bench:enqueue-claimed]', ...args)

/** Child: pairs of (emit transaction + its handler runs, insert transaction), timed. */
async function child() {
  setInterval(() => {}, 60_000) // keep alive until the figures are sent
  const { boot, serve } = require('./support/app')
  const { now } = require('./support/messages')
  const { median } = require('./support/stats')
  const { cds, srv, queued } = await boot()
  let ran = 0
  srv.on('noop', () => void ran++)
  await serve(cds)
  const emit = async () => {
    const expected = ran + config.perTx
    const start = now()
    await cds.tx(async () => {
      for (let n = 0; n < config.perTx; n++) await queued.emit('noop', { n })
    })
    const committed = now() - start
    while (ran < expected) await new Promise(resolve => setImmediate(resolve))
    return committed
  }
  const insert = async () => {
    const start = now()
    await cds.tx(() => INSERT.into('perf.Records').entries({ ID: cds.utils.uuid(), n: 0 }))
    return now() - start
  }
  for (let i = 0; i < 20; i++) await emit() // warm-up
  const emits = []
  const inserts = []
  for (let i = 0; i < config.samples; i++) {
    if (i % 2) {
      emits.push(await emit())
      inserts.push(await insert())
    } else {
      inserts.push(await insert())
      emits.push(await emit())
    }
  }
  await new Promise(resolve => process.send({ emit: median(emits), insert: median(inserts) }, resolve))
}

async function parent() {
  const { withServer, perVersion } = require('./support/versions')
  const { median } = require('./support/stats')
  const rows = await withServer(config.dbs, async server => {
    const rows = []
    for (const kind of config.dbs) {
      const results = await perVersion({
        script: 'enqueue-claimed.js', kind, server, reps: config.reps, env: { BENCH_ENQUEUE_CHILD: 'yes' },
        seen: (impl, rep, r) => log(kind, impl, `rep ${rep + 1}:`, `emit transaction ${r.emit.toFixed(3)} ms, insert transaction ${r.insert.toFixed(3)} ms`)
      })
      for (const [impl, runs] of results) {
        const [emit, insert] = [median(runs.map(r => r.emit)), median(runs.map(r => r.insert))]
        rows.push(`| ${kind} | ${impl} | ${emit.toFixed(3)} | ${insert.toFixed(3)} | ${(emit / insert).toFixed(2)} |`)
      }
    }
    return rows
  })
  console.log(`Transactions of ${config.perTx} emit${config.perTx > 1 ? 's' : ''} claimed at enqueue (median of ${config.reps} processes, ${config.samples} samples each):\n`)
  console.log('| database | version | emit transaction (ms) | insert transaction (ms) | emit ÷ insert |\n|---|---|---|---|---|')
  console.log(rows.join('\n'))
}

require('./support/processes').runScript('BENCH_ENQUEUE_CHILD', child, parent)
