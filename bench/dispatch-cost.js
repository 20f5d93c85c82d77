/**
 * What CAP's dispatch of one message costs, step by step: the pieces CAP's built-in queue and this plugin put
 * around a handler (the event context, the service transaction, the request object, `cds.connect.to`, the
 * AsyncLocalStorage behind `cds.context`). Each step runs `BENCH_ITERATIONS` times in a loop in this process, with
 * the bench app booted (plugin loaded, SQLite in memory-free temp file), and reports CPU microseconds per call,
 * the median of `BENCH_ROUNDS` rounds. Run: `node bench/dispatch-cost.js` (about 20 s); `npm run bench` includes it.
 */
const fs = require('fs')
const os = require('os')
const path = require('path')
const { median } = require('./support/stats')
const { environment } = require('./support/app')

const ITERATIONS = Number(process.env.BENCH_ITERATIONS ?? 20000)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5)

/** CPU microseconds per call of `step` (sync or async), median over rounds. */
async function cost(step) {
  for (let i = 0; i < 1000; i++) await step(i) // warm-up: JIT, caches
  const rounds = []
  for (let r = 0; r < ROUNDS; r++) {
    const start = process.cpuUsage()
    for (let i = 0; i < ITERATIONS; i++) await step(i)
    const used = process.cpuUsage(start)
    rounds.push((used.user + used.system) / ITERATIONS)
  }
  return median(rounds)
}

async function measure() {
  const { boot } = require('./support/app')
  const { cds, srv } = await boot()
  srv.on('noop', () => {})
  const Privileged = cds.User.Privileged
  const init = () => ({ user: new Privileged('bench-user'), id: cds.utils.uuid(), tenant: 't1', locale: 'en' })
  const event = n => new cds.Event({ event: 'noop', data: { n }, headers: {}, queue: { messageId: 'x', attempt: 1 } })
  const steps = {
    'JSON.parse of a stored message (the codec)': () => JSON.parse('{"cds.internal.user":"u","service":"Bench","context":{"id":"c"},"event":"noop","data":{"n":1},"headers":{}}'),
    'cds.connect.to(name), service already connected': () => cds.connect.to('Bench'),
    'new cds.User.Privileged(id)': () => new Privileged('bench-user'),
    'new cds.EventContext({ user, id, tenant, locale })': () => new cds.EventContext(init()),
    'new cds.Event({ event, data, headers, queue })': i => event(i),
    'new cds.Request({ event, data, headers, queue })': i => new cds.Request({ event: 'noop', data: { n: i }, headers: {} }),
    'cds._with(ctx, fn): cds.context for a handler (AsyncLocalStorage)': () => cds._with(new cds.EventContext(init()), async () => {}),
    'srv.tx(ctx) + tx.commit(), no dispatch': async () => {
      const tx = srv.tx(new cds.EventContext(init()))
      await tx.commit()
    },
    'srv.dispatch(event) inside a tx (no-op handler): handler lookup + call': async function () {
      await this.tx.dispatch(event(0))
    },
    'srv.tx(ctx, tx => tx.dispatch(event)): all of the above, as CAP dispatches a message': i =>
      srv.tx(init(), tx => tx.dispatch(event(i)))
  }
  // one service transaction reused by the dispatch-only step, so it measures dispatch alone
  const shared = { tx: srv.tx(new cds.EventContext(init())) }
  const results = []
  for (const [name, step] of Object.entries(steps)) results.push({ name, micros: await cost(step.bind(shared)) })
  return results
}

/** Runs `measure()` in a child process on a fresh SQLite file; its rows `{ name, micros }`. */
async function dispatchCost() {
  const { runOnce } = require('./support/processes')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'event-queues-dispatch-'))
  try {
    const db = { kind: 'sqlite', credentials: { url: path.join(dir, 'bench.sqlite') } }
    return await runOnce('dispatch-cost.js', environment('plugin', db, { BENCH_DISPATCH_CHILD: '1' }))
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

async function main() {
  if (process.env.BENCH_DISPATCH_CHILD) {
    const results = await measure()
    return process.send(results, () => process.exit(0))
  }
  for (const { name, micros } of await dispatchCost()) console.log(`${micros.toFixed(2).padStart(8)} µs  ${name}`)
}

if (require.main === module) {
  main().catch(e => {
    console.error(e)
    process.exit(1)
  })
}

module.exports = { dispatchCost }
