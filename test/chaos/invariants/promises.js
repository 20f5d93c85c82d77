const { groupBy, MARGIN } = require('./facts')
const { FAILED, isSecondDelivery } = require('./messages')
const { ms } = require('../queues')

/**
 * Promises of single features, checked across everything else that happened: I10 a rate limit holds across the
 * instances, and a circuit breaker per process as shared by them; I11 nothing runs before it is due (a delay, or a row CAP's columns say another runner
 * holds); I13 the plugin never fails the application's transaction or an operator's call; I14 a recurring task
 * never runs twice at once, never before its interval, never after it was unscheduled or re-scheduled.
 */

/** A start measured in the handler may lag the limiter's own clock reading; a due time is compared with the request's start. */
const WINDOW_MARGIN = 150
const DUE_MARGIN = 250
/**
 * Messages claimed before a breaker opened may still start: a batch hands back what has not started within 1 s (its
 * timer late on a loaded machine).
 */
const CLAIMED_BEFORE = 2000

const skewOf = (f, pid) => f.processOf(pid)?.skew ?? 0
/** Whether process `pid` stalled between `from` and `to`: what it admitted then may start late, bunched together. */
const stalled = (f, pid, from, to) => (f.stalls.get(pid) ?? []).some(s => s.from <= to && s.at >= from)

/**
 * A run as the circuit breaker counts it: a handler that outlived its handlerTimeout failed when its signal aborted,
 * whatever it did later (seed 10: Mailer's w52 was abandoned at 14.2 s, which opened A's breaker as its third failure,
 * and finished 'ok' at 15.6 s).
 */
const asTheBreakerSees = r => (r.timedOutAt !== undefined && !(r.end < r.timedOutAt) ? { ...r, end: r.timedOutAt, outcome: 'aborted:HANDLER_TIMEOUT' } : r)

/**
 * The attempts of a service as its queue's gates saw them: without the test mode's second deliveries (`deliver:
 * 'twice'`), which run after an attempt succeeded and pass no gate.
 */
function attemptsOf(f, service) {
  const twice = f.plan.requires.queue?.deliver === 'twice'
  return [...f.runs.values()].flatMap(runs => runs.filter((r, i) => r.service === service && !(twice && i > 0 && isSecondDelivery(runs[i - 1], r))))
}

/** The runs of each service configured with `option`, per process: `[service, the option's value, pid, runs]`. */
function* runsPerProcess(f, option) {
  for (const [service, settings] of Object.entries(f.settings)) {
    if (!settings[option]) continue
    for (const [pid, own] of groupBy(attemptsOf(f, service), r => r.pid)) yield [service, settings[option], pid, own]
  }
}

/**
 * A rate limit holds in all instances together (docs/REMOTE-SYSTEMS.md: "in all instances on the database
 * together"), per tenant: never more than `count` starts within `per`, whichever processes started them. A start
 * measured in the handler may come late (WINDOW_MARGIN); a stall of any process starting them excuses a bunch.
 */
function rateLimit(f) {
  const violations = []
  for (const [service, settings] of Object.entries(f.settings)) {
    if (!settings.rateLimit) continue
    const { count, per } = settings.rateLimit
    for (const [tenant, runs] of groupBy(attemptsOf(f, service), r => r.tenant ?? '')) {
      const starts = runs.sort((a, b) => a.start - b.start)
      const stalledAny = (from, to) => starts.some(r => r.start >= from && r.start <= to && stalled(f, r.pid, from - per, to))
      const i = starts.findIndex((r, j) => starts[j + count] !== undefined && starts[j + count].start - r.start < per - WINDOW_MARGIN && !stalledAny(r.start, starts[j + count].start))
      if (i < 0) continue
      const window = starts.slice(i, i + count + 1)
      const pids = [...new Set(window.map(r => r.pid))]
      violations.push({ pids, text: `${count + 1} messages of ${service}${tenant ? ` (tenant ${tenant})` : ''} started within ${(window[count].start - window[0].start) | 0} ms (rateLimit ${count} per ${per} ms, in all instances), from ${f.time(window[0].start)}, by process${pids.length > 1 ? 'es' : ''} ${pids.join(', ')}: ${window.map(f.describeRun).join('; ')}` })
    }
  }
  return violations
}

/**
 * Attempts that end this close together reach the breaker in either order: each settles after its own commit or
 * rollback. Seed 27: a failure and a success of two slots ended 0.2 ms apart; seed 45: a hung handler held SQLite's
 * connection, and when it was abandoned five waiting ones ended within 8 ms, two of them failures.
 */
const SETTLE_MARGIN = 50

/** The ended runs in the order they ended, in groups of ties: runs that ended within SETTLE_MARGIN of a group's first. */
function tiesInEndOrder(runs) {
  const byEnd = runs.filter(r => r.end !== undefined).sort((a, b) => a.end - b.end)
  const groups = []
  for (let i = 0, j; i < byEnd.length; i = j) {
    for (j = i + 1; j < byEnd.length && byEnd[j].end - byEnd[i].end <= SETTLE_MARGIN; j++);
    groups.push(byEnd.slice(i, j))
  }
  return groups
}

/** Every order of a group of ties; beyond 6 runs, the end order and the failures first or last. */
function* orders(ties, failed) {
  if (ties.length > 6) {
    yield ties
    yield [...ties.filter(failed), ...ties.filter(r => !failed(r))]
    yield [...ties.filter(r => !failed(r)), ...ties.filter(failed)]
    return
  }
  if (ties.length <= 1) return yield ties
  for (const [i, first] of ties.entries()) for (const rest of orders(ties.filter((_, j) => j !== i), failed)) yield [first, ...rest]
}

/**
 * Where each process's own failures may have opened a breaker, in end order: the end of every failed attempt that
 * ends a run of `failures` failed ones of that process, and of every failed probe (the first attempts that start once
 * the probe of the last opening is due: a failed probe opens the breaker again). Attempts that started before that
 * probe was due neither open nor close it, as in the replay below. More than the plugin opens (ties and closings by
 * other processes are left out): it only ever excuses. Seed 10: A's probe of 35.3 s failed and opened the breaker
 * again until 41.6 s; B, told so at 37.3 s, saw its own third failure end at 38.3 s and probed at 41.6 s — without the
 * probe's opening here, B's breaker stood open from 38.3 s to 44.3 s.
 */
function openingsPerProcess(runs, failures, isFailure, probeInterval) {
  const openings = new Map()
  for (const [pid, own] of groupBy(runs, r => r.pid)) {
    const ends = []
    // the runs of failed attempts, whatever was open meanwhile
    let streak = 0
    // as the replay below goes: the last opening, and the failed attempts since the breaker last closed
    let opened
    let failedSince = 0
    for (const run of own.filter(r => r.end !== undefined).sort((a, b) => a.end - b.end)) {
      const failed = isFailure(run)
      streak = failed ? streak + 1 : run.outcome === 'ok' ? 0 : streak
      const probe = opened !== undefined && run.start >= opened + probeInterval - WINDOW_MARGIN
      let opens = false
      if (opened === undefined || probe) {
        failedSince = failed ? (probe ? failures : failedSince + 1) : run.outcome === 'ok' ? 0 : failedSince
        opens = failedSince >= failures
        opened = opens ? run.end : undefined
      }
      if (streak >= failures || opens) ends.push(run.end)
    }
    if (ends.length) openings.set(pid, ends)
  }
  return openings
}

/**
 * A circuit breaker per process, replayed from the attempts as they ended: `failures` consecutive failed attempts
 * (a timed-out one is a failure, issue 22) open it at the end of the last; then nothing new may start until the
 * probe is due, one probeInterval later, except what was claimed before (CLAIMED_BEFORE). The first attempt that
 * starts from then on is the probe: its success closes the breaker, its failure opens it again. Attempts that
 * started before the probe was due and end later neither open nor close it. Ties (SETTLE_MARGIN) may have settled in
 * any order: the replay follows every order, and reports a violation only if each of them has one.
 * The breaker is shared (docs/REMOTE-SYSTEMS.md): another process's opening pauses this one too, and while it is
 * open this process's own failures open nothing: its probe is due when that opening's is. So where another process
 * may have opened it less than a probeInterval before this one's failures would, the earliest such opening is the
 * one in force (seed 27: C opened it at 21.4 s, A's third failure ended at 24.2 s while it was open, and A probed
 * at 27.4 s as C's opening said). And every process probes when the probe is due: where this process's probe failed
 * and another's of the same turn succeeded, the success closed the breaker everywhere (seed 27: C's probe failed at
 * 10.03 s, A's succeeded at 10.05 s, C resumed at 10.07 s), so it is open only until that success ended.
 */
function breaker(f) {
  const violations = []
  const isFailure = run => FAILED.test(run.outcome) && !run.outcome.startsWith('aborted:SHUTDOWN')
  // per service, computed once: its runs in every process, and where each process's failures may have opened it
  const ofService = new Map()
  const shared = (service, failures, probeInterval) => {
    if (!ofService.has(service)) {
      const runs = attemptsOf(f, service).map(asTheBreakerSees)
      ofService.set(service, { runs, openings: openingsPerProcess(runs, failures, isFailure, probeInterval) })
    }
    return ofService.get(service)
  }
  for (const [service, { failures, probeInterval }, pid, attempts] of runsPerProcess(f, 'breaker')) {
    const own = attempts.map(asTheBreakerSees)
    /** The earliest opening by another process that may still hold at `at`, with its process. */
    const openElsewhere = at => {
      let found
      for (const [other, ends] of shared(service, failures, probeInterval).openings) {
        if (other === pid) continue
        const o = ends.find(end => end <= at && at < end + probeInterval)
        if (o !== undefined && (found === undefined || o < found.at)) found = { at: o, pid: other }
      }
      return found
    }
    /** The first success of another process's probe of the turn due at `due`, begun by the time this one's failed at `failedAt`. */
    const probeSucceededElsewhere = (due, failedAt) => shared(service, failures, probeInterval).runs
      .filter(r => r.pid !== pid && r.outcome === 'ok' && r.end !== undefined && r.start >= due - WINDOW_MARGIN && r.start <= failedAt + SETTLE_MARGIN)
      .sort((a, b) => a.end - b.end)[0]
    /** The breaker after `run` ended in `state`; or the violation its opening shows. */
    const step = ({ streak, probeDue }, run) => {
      const failed = isFailure(run)
      let probed
      if (probeDue !== undefined) {
        if (run.start < probeDue - WINDOW_MARGIN) return { streak, probeDue } // claimed before the probe was due
        probed = probeDue // the probe
        probeDue = undefined
        streak = failed ? failures : 0
      } else {
        streak = failed ? streak + 1 : run.outcome === 'ok' ? 0 : streak
      }
      if (streak < failures) return { streak, probeDue }
      const opened = run.end
      const elsewhere = openElsewhere(opened)
      probeDue = (elsewhere?.at ?? opened) + probeInterval
      const closer = probed !== undefined ? probeSucceededElsewhere(probed, opened) : undefined
      const until = closer ? Math.min(probeDue, closer.end) : probeDue
      const early = own.filter(r => r.start > opened + CLAIMED_BEFORE && r.start < until - WINDOW_MARGIN && !stalled(f, pid, opened - CLAIMED_BEFORE, r.start))
      if (!early.length) return closer ? { streak: 0, probeDue: undefined } : { streak, probeDue }
      const also = elsewhere ? ` (open since ${f.time(elsewhere.at)} by process ${elsewhere.pid}'s failures)` : ''
      return { violation: { pids: [pid], text: `process ${pid}: the circuit breaker of ${service} (failures ${failures}, probeInterval ${probeInterval} ms) opened after ${failures} failed attempts ending at ${f.time(opened)}${also} (the last: ${f.describeRun(run)}), yet ${early.length} attempts started before the probe was due: ${early.slice(0, 3).map(f.describeRun).join('; ')}` } }
    }
    /** The breaker after the runs of `order` ended in `state`, or the first violation on the way. */
    const replay = (state, order) => order.reduce((s, run) => (s.violation ? s : step(s, run)), state)
    let states = new Map([['0|', { streak: 0, probeDue: undefined }]])
    let violation
    for (const ties of tiesInEndOrder(own)) {
      const next = new Map()
      const each = [...orders(ties, isFailure)]
      for (const end of [...states.values()].flatMap(state => each.map(order => replay(state, order)))) {
        if (end.violation) violation ??= end.violation
        else next.set(`${end.streak}|${end.probeDue ?? ''}`, end)
      }
      states = next
      if (!states.size) break
    }
    if (!states.size && violation) violations.push(violation)
  }
  return violations
}

function I10(f) {
  return [...rateLimit(f), ...breaker(f)].map(v => ({ ...v, invariant: 'I10', title: 'a rate limit holds across the instances, and a circuit breaker in each process as shared by them' }))
}

function I11(f) {
  const violations = []
  for (const [wid, { message, request }] of f.asked) {
    if (!f.intents.has(wid) || !(message.delay || message.heldAgo) || skewOf(f, request.pid)) continue
    const first = (f.runsByWid.get(wid) ?? [])[0]
    if (!first) continue
    const due = message.delay ? request.sentAt + message.delay : request.sentAt + f.settingsOf(message.service).timeout - message.heldAgo
    const why = message.delay ? `delayed by ${message.delay} ms` : `written 'processing' by another runner ${message.heldAgo} ms ago (timeout ${f.settingsOf(message.service).timeout} ms)`
    if (first.start < due - DUE_MARGIN) violations.push({ wid, pids: [first.pid], text: `${wid} (${message.service}), ${why} in a request sent at ${f.time(request.sentAt)}, was due at ${f.time(due)} at the earliest, yet started at ${f.time(first.start)}: ${f.describeRun(first)}` })
  }
  return violations.map(v => ({ ...v, invariant: 'I11', title: 'nothing runs before it is due' }))
}

/** The database unreachable or the pool exhausted on a loaded machine: not the plugin's failure. */
const UNAVAILABLE = /ResourceRequest timed out|not queryable|Connection terminated|ECONNREFUSED|terminating connection/

/** An error of the plugin's own bookkeeping (its table, its runner), not of the database or the machine in general. */
const PLUGINS = /outbox|event[-_ ]?queues|queue/i
/**
 * A lock conflict in an application's transaction. The app's own statements take no locks another request waits for
 * (inserts of new keys, reads), so a deadlock or a lock time-out in one of its requests is between the statements
 * the queue ran in it (its rows, its per-key counters) — issue 31, R9: the counter of each ordering key stays locked
 * until commit, in the order the app queued, and two requests queueing for the same two keys in opposite order
 * deadlocked. The error names no table of the plugin ("deadlock detected"), which is why I13 once let it pass.
 */
const LOCKS = /deadlock|lock ?time ?out|lock_timeout|could not obtain lock|could not serialize|40P01|55P03|40001|SQLITE_BUSY|database is locked/i

function I13(f) {
  const violations = []
  const excused = (pid, from, to) => f.excuse(pid, from, to) || f.processOf(pid)?.endedAt <= to + MARGIN
  for (const r of f.history.requests.filter(r => r.outcome === 'failed')) {
    const body = JSON.stringify(r.body ?? '')
    // a lock conflict is the queue's, whatever else happened (the database was up to report it), except SQLite's
    // lock held by the app's own bulk import
    const importing = f.history.requests.some(i => i.kind === 'import' && i.sentAt <= r.doneAt && i.doneAt >= r.sentAt)
    const lock = LOCKS.test(body) && !(importing && /SQLITE_BUSY|database is locked/.test(body))
    if (!lock && (excused(r.pid, r.sentAt, r.doneAt) || !PLUGINS.test(body))) continue
    if (f.unsubscribed(r.tenant)) continue
    violations.push({ pids: [r.pid], text: `the app's ${r.kind} request (${r.messages.map(m => `${m.wid}${m.orderKey ? ` ${m.service} ${m.orderKey}` : ''}`).join(', ')}) failed with ${r.status} at ${f.time(r.doneAt)}${lock ? ', a lock conflict of the queue\'s statements' : ', with no fault to explain it'}: ${String(JSON.stringify(r.body ?? r.error)).slice(0, 400)}` })
  }
  for (const a of f.history.operator) {
    const failed = a.via === 'cli' ? a.code === 1 : a.status >= 500 && !UNAVAILABLE.test(JSON.stringify(a.body))
    if (!failed || f.history.outages.some(o => o.from <= a.to && (o.to ?? Infinity) >= a.from) || f.processOf(a.pid)?.endedAt <= a.to + MARGIN) continue
    violations.push({ text: `an operator's ${a.via} ${a.action} failed at ${f.time(a.to)}: ${a.via === 'cli' ? a.output.slice(0, 400) : `${a.status} ${String(JSON.stringify(a.body ?? a.error)).slice(0, 400)}`}` })
  }
  return violations.map(v => ({ ...v, invariant: 'I13', title: "the plugin never fails the application's transaction or an operator's call" }))
}

/** I14 over the runs of each task: never two at once, never before its interval, nothing after an unschedule or of an old schedule. */
function I14(f) {
  const violations = []
  const runs = [...f.ticks.values()].flat()
  const schedules = f.history.schedules.filter(s => s.status >= 200 && s.status < 300)
  for (const [key, own] of groupBy(runs, r => `${r.tenant} ${r.task}`)) {
    const [tenant, task] = key.split(' ')
    const mine = schedules.filter(s => String(s.tenant) === tenant && s.task === task)
    own.sort((a, b) => a.start - b.start)
    for (let i = 0; i + 1 < own.length; i++) {
      const [run, next] = [own[i], own[i + 1]]
      const excuse = f.excuse(run.pid, run.start, next.start)
      if (run.end === undefined || run.end > next.start + MARGIN) {
        if (!excuse) violations.push({ kind: 'overlap', pids: [run.pid, next.pid], text: `task ${task}: two runs at once: ${f.describeRun(run)}; ${f.describeRun(next)}` })
        continue
      }
      const every = mine.find(s => s.kind === 'schedule' && s.version === run.version)?.every
      const rescheduled = mine.some(s => s.sentAt <= next.start && s.doneAt >= run.start)
      if (!every || rescheduled || excuse || run.outcome !== 'ok' || skewOf(f, run.pid)) continue
      if (next.start < run.end + ms(every) - DUE_MARGIN) violations.push({ kind: 'early', pids: [next.pid], text: `task ${task} (every ${every}) ran again ${(next.start - run.end) | 0} ms after its previous run ended: ${f.describeRun(run)}; then ${f.describeRun(next)}` })
    }
    for (const run of own) {
      // a schedule whose request was still running when the unschedule began may have committed after it
      const removed = mine.find(s => s.kind === 'unschedule' && s.doneAt + MARGIN < run.start && !mine.some(t => t.kind === 'schedule' && t.doneAt > s.sentAt && t.sentAt < run.start))
      if (removed) violations.push({ kind: 'unscheduled', pids: [run.pid], text: `task ${task} ran after it was unscheduled at ${f.time(removed.doneAt)}: ${f.describeRun(run)}` })
      const newer = mine.find(s => s.kind === 'schedule' && s.version > run.version && s.doneAt + MARGIN < run.start)
      if (newer) violations.push({ kind: 'replaced', pids: [run.pid], text: `task ${task} ran its version ${run.version} after version ${newer.version} was scheduled at ${f.time(newer.doneAt)}: ${f.describeRun(run)}` })
    }
  }
  // a chain that should not exist runs every second: one violation per task and kind, with the count
  const grouped = new Map()
  for (const v of violations) {
    const key = `${v.text.split(':')[0]} ${v.kind}`
    if (!grouped.has(key)) grouped.set(key, { ...v, count: 0 })
    grouped.get(key).count++
  }
  return [...grouped.values()].map(v => ({
    ...v, text: v.count > 1 ? `${v.text} (and ${v.count - 1} more runs like it)` : v.text,
    invariant: 'I14', title: 'a recurring task runs once at a time, at its interval, and not after it was unscheduled or replaced'
  }))
}

module.exports = { I10, I11, I13, I14 }
