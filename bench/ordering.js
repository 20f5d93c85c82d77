/**
 * `node bench/ordering.js`: throughput of ordering keys. Drains a backlog of `noop` messages three ways, on a SQLite
 * file and an embedded PostgreSQL server, one process per repetition:
 * - unordered: no keys, the path every project without ordering takes;
 * - ordered: the same backlog spread over BENCH_KEYS keys (default 100), round robin, each key in enqueue order.
 * With BENCH_BASELINE=<directory of a built copy of the plugin> (e.g. `git archive <commit> | tar -x -C dir`, then
 * `npm run build` there with node_modules linked) the unordered drain also runs on that copy, in alternation, so
 * "unchanged when ordering exists but is unused" is a comparison in one run. It measures; it does not pass or fail.
 * Sizes: BENCH_MESSAGES (5000), BENCH_KEYS (100), BENCH_REPS (3), BENCH_DBS ("sqlite,postgres").
 */
const path = require('path')

const config = {
  messages: Number(process.env.BENCH_MESSAGES ?? 5000),
  keys: Number(process.env.BENCH_KEYS ?? 100),
  reps: Number(process.env.BENCH_REPS ?? 3),
  dbs: (process.env.BENCH_DBS ?? 'sqlite,postgres').split(','),
  baseline: process.env.BENCH_BASELINE,
  drainTimeout: 300_000
}
const log = (...args) => console.error('[bench:ordering]', ...args)

/** Child: boots the bench app with the plugin, drains one backlog (BENCH_SCENARIO), reports messages per second. */
async function child() {
  setInterval(() => {}, 60_000) // keep alive until the figures are sent
  const { boot, serve } = require('./support/app')
  const { MESSAGES, now, pending } = require('./support/messages')
  const { cds, srv, queued } = await boot()
  srv.on('noop', () => {})
  await serve(cds)
  const keyed = process.env.BENCH_SCENARIO === 'ordered'
  // Written straight into the table, as a backlog left by earlier traffic; timestamps 1 µs apart give the enqueue order.
  const base = Date.now() - 60_000
  await cds.tx(async () => {
    for (let done = 0; done < config.messages; done += 1000) {
      const entries = []
      for (let n = done; n < Math.min(config.messages, done + 1000); n++) {
        const at = new Date(base + Math.floor(n / 1000)).toISOString().replace('Z', `${String((n % 1000) * 10).padStart(4, '0')}Z`)
        const msg = JSON.stringify({ 'cds.internal.user': 'anonymous', service: 'Bench', context: {}, event: 'noop', data: { n } })
        const entry = { ID: cds.utils.uuid(), timestamp: at, target: 'queue', msg, attempts: 0, dueAt: new Date(base).toISOString() }
        if (keyed) entry.orderingKey = `key-${n % config.keys}`
        entries.push(entry)
      }
      await INSERT.into(MESSAGES).entries(entries)
    }
  })
  const start = now()
  while ((await pending(cds)) > 0 && now() - start < config.drainTimeout) await queued.flush()
  const seconds = (now() - start) / 1000
  const result = { perSecond: config.messages / seconds, seconds, left: await pending(cds) }
  await new Promise(resolve => process.send(result, resolve))
}

async function parent() {
  const { startServer, stopServer } = require('./support/postgres')
  const { newDatabase } = require('./support/databases')
  const { environment } = require('./support/app')
  const { runOnce } = require('./support/processes')
  const { median } = require('./support/stats')

  const variants = [
    { name: 'unordered', scenario: 'unordered' },
    ...(config.baseline ? [{ name: 'unordered (baseline)', scenario: 'unordered', plugin: config.baseline }] : []),
    { name: `ordered, ${config.keys} keys`, scenario: 'ordered' }
  ]
  const server = config.dbs.includes('postgres') ? await startServer() : undefined
  const rows = []
  try {
    for (const kind of config.dbs) {
      const figures = new Map(variants.map(v => [v.name, []]))
      for (let rep = 0; rep < config.reps; rep++) {
        for (const variant of variants) {
          const { db, cleanup } = await newDatabase(kind, server)
          const env = environment('plugin', db, { BENCH_ORDERING_CHILD: 'yes', BENCH_SCENARIO: variant.scenario })
          if (variant.plugin) env.CDS_PLUGINS = JSON.stringify({ 'cds-event-queues': { impl: path.join(variant.plugin, 'cds-plugin.js') } })
          try {
            const result = await runOnce('ordering.js', env)
            log(kind, variant.name, `rep ${rep + 1}:`, `${result.perSecond.toFixed(0)} msg/s`, result.left ? `(${result.left} left!)` : '')
            figures.get(variant.name).push(result.perSecond)
          } finally {
            await cleanup()
          }
        }
      }
      for (const [name, values] of figures) rows.push(`| ${kind} | ${name} | ${median(values).toFixed(0)} | ${values.map(v => v.toFixed(0)).join(', ')} |`)
    }
  } finally {
    if (server) await stopServer(server)
  }
  console.log(`${config.messages} noop messages drained by one process (median of ${config.reps}):\n`)
  console.log('| database | backlog | messages/s | repetitions |\n|---|---|---|---|')
  console.log(rows.join('\n'))
}

require('./support/processes').runScript('BENCH_ORDERING_CHILD', child, parent)
