/**
 * `node bench/profile.js`: where the CPU of a drain goes, for this plugin and for CAP's built-in queue. Runs the
 * drain scenarios of inprocess.js (no-op handler, handler writing one row, mixed queues) once per contender under
 * `node --cpu-prof`, on a fresh SQLite file and (BENCH_DBS) a database of a durable embedded PostgreSQL server, and
 * prints per profile the CPU by package and the inclusive share of the functions a dispatch goes through; then the
 * remote-call drain (20 ms, concurrency 50) of each contender. The profiles stay in $TMPDIR/event-queues-profiles
 * for Chrome DevTools. Sizes: BENCH_MESSAGES (3000), BENCH_SMALL (1000), BENCH_REMOTE_MESSAGES (1000).
 */
const fs = require('fs')
const os = require('os')
const path = require('path')
const { environment } = require('./support/app')
const { start, nextMessage, stop } = require('./support/processes')
const { startServer, stopServer, createDatabase, dbConfig, newDatabaseName } = require('./support/postgres')
const { startRemote, remoteService } = require('./support/remote')

const OUT = path.join(os.tmpdir(), 'event-queues-profiles')
const config = {
  messages: Number(process.env.BENCH_MESSAGES ?? 3000),
  smallBacklog: Number(process.env.BENCH_SMALL ?? 1000),
  remoteMessages: Number(process.env.BENCH_REMOTE_MESSAGES ?? 1000),
  drainTimeout: 180_000,
  pollEvery: 10
}
const dbs = (process.env.BENCH_DBS ?? 'sqlite,postgres').split(',')

/** Functions whose inclusive share says what a dispatch costs (name as V8 reports it, file it is in). */
const MARKERS = [
  ['srv.tx(ctx, fn): service transaction, begin to commit', 'srv_tx', /srv-tx\.js$/],
  ['srv.dispatch: handler lookup and phases', 'dispatch', /srv-dispatch\.js$/],
  ['cds.connect.to', 'to', /cds-connect\.js$/],
  ['new cds.EventContext', 'EventContext', /req\/context\.js$/],
  ['plugin: claim (store)', 'claim', /lib\/store\/(index|portable)\.js$/],
  ['plugin: one attempt (lib/runner/attempt.js)', 'attempt', /lib\/runner\/attempt\.js$/],
  ['plugin: a batch (lib/runner/batch.js)', 'attemptBatch', /lib\/runner\/batch\.js$/],
  ['CAP queue: a pass of its runner (_processTasks)', '_processTasks', /libx\/queue\/index\.js$/],
  ['CAP remote service: one HTTP call (remote/utils/client.js run)', 'run', /remote\/utils\/client\.js$/]
]

/** The package a script belongs to: node_modules/<pkg>, the plugin's lib/, Node itself, or V8's own entries. */
function packageOf({ url, functionName }) {
  if (!url) return `V8 ${functionName || '(native)'}`
  const m = url.match(/node_modules\/((?:@[^/]+\/)?[^/]+)/)
  if (m) return m[1]
  if (url.startsWith('node:')) return '(node core)'
  if (url.includes('/lib/') && !url.includes('node_modules')) return 'cds-event-queues (lib/)'
  return path.basename(url)
}

function analyse(file) {
  const profile = JSON.parse(fs.readFileSync(file, 'utf8'))
  const byId = new Map(profile.nodes.map(n => [n.id, n]))
  const parent = new Map()
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
  const total = profile.samples.length
  const self = new Map()
  const functions = new Map()
  const inclusive = new Map(MARKERS.map(([label]) => [label, 0]))
  const counts = new Map()
  for (const id of profile.samples) counts.set(id, (counts.get(id) ?? 0) + 1)
  for (const [id, hits] of counts) {
    const node = byId.get(id)
    const pkg = node.callFrame.functionName === '(idle)' ? '(idle)' : packageOf(node.callFrame)
    self.set(pkg, (self.get(pkg) ?? 0) + hits)
    const fn = `${node.callFrame.functionName || '(anonymous)'} (${node.callFrame.url ? path.basename(node.callFrame.url) : 'V8'})`
    if (pkg !== '(idle)') functions.set(fn, (functions.get(fn) ?? 0) + hits)
    const seen = new Set()
    for (let at = id; at !== undefined; at = parent.get(at)) {
      const { functionName, url } = byId.get(at).callFrame
      for (const [label, name, where] of MARKERS) if (!seen.has(label) && functionName === name && where.test(url)) seen.add(label)
    }
    for (const label of seen) inclusive.set(label, inclusive.get(label) + hits)
  }
  const busy = total - (self.get('(idle)') ?? 0)
  const share = n => `${((100 * n) / busy).toFixed(1)}%`
  return {
    samples: total,
    busySamples: busy,
    byPackage: [...self].filter(([k]) => k !== '(idle)').sort((a, b) => b[1] - a[1]).slice(0, 10).map(([k, v]) => [k, share(v)]),
    inclusive: [...inclusive].filter(([, v]) => v > 0).map(([k, v]) => [k, share(v)]),
    functions: [...functions].sort((a, b) => b[1] - a[1]).slice(0, 12).map(([k, v]) => [k, share(v)])
  }
}

/** Runs inprocess.js under the profiler; its result once it exited by itself (a signal would lose the profile). */
async function profiled(env, dir) {
  const child = start('inprocess.js', env, ['--cpu-prof', '--cpu-prof-dir', dir])
  const exited = new Promise(resolve => child.once('exit', resolve))
  try {
    const result = await nextMessage(child)
    await exited
    return result
  } finally {
    await stop(child)
  }
}

/** `part`: 'drains', or 'remote' against the server `remote` at concurrency 50. */
async function profileOne(kind, impl, server, part, remote) {
  const dir = path.join(OUT, `${kind}-${impl}-${part}`)
  fs.rmSync(dir, { recursive: true, force: true })
  fs.mkdirSync(dir, { recursive: true })
  let db
  let tmp
  if (kind === 'sqlite') {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'event-queues-profile-'))
    db = { kind: 'sqlite', credentials: { url: path.join(tmp, 'bench.sqlite') } }
  } else {
    const database = newDatabaseName()
    await createDatabase(database, server)
    db = dbConfig(database, server)
  }
  try {
    const extra = { BENCH_CONFIG: JSON.stringify(config), BENCH_PART: part }
    let options = {}
    if (part === 'remote') {
      Object.assign(extra, { BENCH_CONCURRENCY: '50', BENCH_REMOTE_URL: remote.url })
      options = { queue: impl === 'cap' ? { chunkSize: 50 } : { concurrency: 50 }, requires: { Remote: remoteService(remote.url) } }
    }
    const result = await profiled(environment(impl, db, extra, options), dir)
    const file = fs.readdirSync(dir).find(f => f.endsWith('.cpuprofile'))
    return { result, analysis: analyse(path.join(dir, file)), file: path.join(dir, file) }
  } finally {
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true })
  }
}

async function main() {
  const server = dbs.includes('postgres') ? await startServer() : undefined
  const remote = await startRemote(20)
  try {
    for (const [kind, part] of [...dbs.map(kind => [kind, 'drains']), [dbs[0], 'remote']]) {
      for (const impl of ['plugin', 'cap']) {
        const { result, analysis, file } = await profileOne(kind, impl, server, part, remote)
        const cpu = key => `${result[key].perSecond.toFixed(0)} msg/s, ${result[key].cpuMicros.toFixed(0)} µs CPU/msg`
        console.log(`\n### ${impl} on ${kind}, ${part} (${path.relative(os.tmpdir(), file)})`)
        if (part === 'remote') console.log(`remote-call drain at concurrency 50: ${cpu('remote')}; ${analysis.busySamples} busy samples`)
        else console.log(`no-op drain: ${cpu('drainNoop')}; write drain: ${cpu('drainWrite')}; mixed: ${cpu('drainMixed')}; ${analysis.busySamples} busy samples`)
        console.log('\n| self CPU by package | share of busy samples |\n|---|---:|')
        for (const [k, v] of analysis.byPackage) console.log(`| ${k} | ${v} |`)
        console.log('\n| inclusive: samples with this function on the stack | share |\n|---|---:|')
        for (const [k, v] of analysis.inclusive) console.log(`| ${k} | ${v} |`)
        console.log('\n| top functions, self CPU | share |\n|---|---:|')
        for (const [k, v] of analysis.functions) console.log(`| ${k} | ${v} |`)
      }
    }
  } finally {
    await remote.stop()
    if (server) await stopServer(server)
  }
}

// bench/broker.js reads its producer's profile with analyse()
if (require.main === module) {
  main().catch(e => {
    console.error(e)
    process.exitCode = 1
  })
}

module.exports = { analyse }
