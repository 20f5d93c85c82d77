const { pidOfClaim } = require('../state')
const { QUEUE_OF } = require('../variants')

/**
 * I15: no queue stalls another. A message that could run at once — unkeyed, not delayed, on a queue without a rate
 * limit or a circuit breaker (Archive's and Clerk's, the default queue) — waits only while every process that could
 * run it is busy with the handlers the remote log shows, or unable to run anything (the database away, a process
 * stalled, paused, starting or just gone, SQLite's one write lock held by the CLI or an import, or the process taking in
 * one of the app's requests of large payloads), or while its queue works through the messages due before it (a claim
 * takes a queue's rows in due order; see `inTurn`). Issue 31's R6: with Redis
 * frozen, each relay's XADD waited for an hour, the relays took every slot of the runner, and the other queues ran
 * nothing until Redis came back; what held the slots was the plugin's own relay, which the remote log does not show.
 */

/** A wait shorter than this is latency on a loaded machine, not a stall. */
const STALL = 8000
/** …and a stall is a stretch this long in which some process was free to run the message, yet did not. */
const IDLE = 4000
/**
 * After a process ends or stops, what it had claimed (also at enqueue) is taken over after its lease (8 s) — and I6
 * gives a takeover a poll interval and 60 s more (slots busy with a backlog take over nothing until one is free):
 * a wait that long is I6's to judge, not a stall.
 */
const TAKEOVER = 8000 + 1000 + 60_000
/**
 * How many handlers make a process busy: the runner-wide limit of concurrent handlers (the default queue's
 * `concurrency`, README); on SQLite one, since a handler's transaction takes the one write lock at its begin and
 * holds it while the handler awaits its remote call (issue 22, defect 7), so the others wait for it.
 */
const slotsOf = f => (f.plan.variant.db === 'sqlite' ? 1 : 10)
const SENTINELS = new Set(['Archive', 'Clerk'])
/** A request with payloads this large (or SQLite's import) is the app's own load on the process that takes it in. */
const big = r => r.kind === 'import' || r.messages.some(m => m.size > 2_000_000)

/** [from, to) minus each of `holes`, as a list of intervals. */
function minus([from, to], holes) {
  let parts = [[from, to]]
  for (const [a, b] of holes) parts = parts.flatMap(([x, y]) => (b <= x || a >= y ? [[x, y]] : [[x, a], [b, y]].filter(([p, q]) => q > p)))
  return parts
}

/**
 * When process `p` could run a message now: served, not stalled or paused, not taking in a request of large payloads,
 * fewer handlers running than make it busy. Seed 39 (generator 31, PostgreSQL) sent its first processes 110 and 132 MB
 * of 0.6-3.5 MB documents in 9 s; each had such requests in flight from 6 s to 22 s without a break (up to 14.7 s
 * each), their small requests took 8-13 s meanwhile, and they started 1 and 2 handlers in those 12 s, while the
 * third process, whose last large request ended at 17 s, answered in 0.4-6 s: the app's load of that process.
 */
function freeIntervals(f, p, runs, [from, to]) {
  const slots = slotsOf(f)
  const start = Math.max(from, p.readyAt ?? Infinity)
  const end = Math.min(to, p.endedAt ?? Infinity)
  if (!(end > start)) return []
  const busy = []
  const own = runs.filter(r => r.pid === p.pid)
  // where `slots` handlers run at once (start/end events swept in time order)
  const edges = own.flatMap(r => [[r.start, 1], [r.end ?? Infinity, -1]]).sort((a, b) => a[0] - b[0] || a[1] - b[1])
  let running = 0
  let since
  for (const [at, step] of edges) {
    running += step
    if (running >= slots && since === undefined) since = at
    if (running < slots && since !== undefined) busy.push([since, at]), (since = undefined)
  }
  if (since !== undefined) busy.push([since, Infinity])
  const stalls = (f.stalls.get(p.pid) ?? []).map(s => [s.from - 1000, s.at + 1000])
  const paused = f.history.pauses.filter(x => x.pid === p.pid).map(x => [x.from, (x.to ?? Infinity) + 1000])
  const loaded = f.history.requests.filter(r => r.pid === p.pid && big(r)).map(r => [r.sentAt, r.doneAt + 1000])
  return minus([start, end], [...busy, ...stalls, ...paused, ...loaded])
}

/**
 * Stretches of a message's wait that are no stall: the database away, SQLite's write lock held by the CLI or the
 * app's import; and where a process that held the message (it enqueued it — the claim at enqueue — or a sample saw
 * it claimed there) ended, stopped or ran with a skewed clock: until its lease ran out and a poll took it over.
 */
function excused(f, ids, request) {
  const holes = f.history.outages.map(o => [o.from, (o.to ?? Infinity) + 2000])
  // SQLite has one writer: the app's bulk import holds everyone's writes while it runs, the CLI beside the app while
  // it writes at the end of its run (before, it waits for the handlers' transactions: seed 14's SQLITE_BUSY)
  if (f.plan.variant.db === 'sqlite') {
    for (const a of f.history.operator.filter(a => a.via === 'cli')) holes.push([a.to - 1000, a.to + 500])
    for (const r of f.history.requests.filter(r => r.kind === 'import')) holes.push([r.sentAt, r.doneAt + 1000])
  }
  const holders = new Set([request.pid])
  for (const { claims } of f.history.claimSamples) for (const c of claims) if (ids.has(c.ID) && c.status === 'processing') holders.add(pidOfClaim(c.claimedBy))
  for (const pid of holders) {
    const p = f.processOf(pid)
    if (!p) continue
    if (p.endedAt !== undefined) holes.push([p.endedAt - 1000, p.endedAt + TAKEOVER])
    if (p.skew) holes.push([p.startedAt, (p.endedAt ?? Infinity) + TAKEOVER])
    for (const x of f.history.pauses.filter(x => x.pid === pid)) holes.push([x.from - 1000, (x.to ?? Infinity) + TAKEOVER])
  }
  return holes
}

/**
 * Stretches of `wid`'s wait that are its turn: its queue's unkeyed messages due before it was enqueued (their intents
 * written earlier, plus their delay) that had not started yet, while they kept starting — a gap of IDLE without one
 * start of them is no turn, and a stall if a process was free meanwhile. Seed 10 (postgres-portable) had 110 delayed
 * 3 MB Archive messages due from 11 s to 17 s; the default queue's claims took them in due order at ~6 a second
 * across three processes, and Clerk's w69, enqueued at 18 s, ran at 34.5 s, after the last of them started at 34.5 s.
 */
function inTurn(f, wid, committed, started) {
  const own = f.intents.get(wid)
  const queue = QUEUE_OF[f.asked.get(wid).message.service]
  if (!own || !queue) return []
  const starts = []
  for (const [other, { message }] of f.asked) {
    if (other === wid || message.orderKey || QUEUE_OF[message.service] !== queue) continue
    const intent = f.intents.get(other)
    if (!intent || intent.at + (message.delay ?? 0) >= own.at) continue
    const first = (f.runsByWid.get(other) ?? [])[0]?.start
    if (first !== undefined && first > committed && first <= started) starts.push(first)
  }
  starts.sort((a, b) => a - b)
  const turns = []
  let from = committed
  for (const at of starts) {
    if (at - from < IDLE) turns.push([from, at])
    from = at
  }
  return turns
}

function I15(f) {
  const violations = []
  const runs = [...f.runs.values()].flat()
  const producers = f.history.processes.filter(p => p.app !== 'consumer')
  for (const [wid, { message, request }] of f.asked) {
    if (!SENTINELS.has(message.service) || message.delay || message.heldAgo || message.size > 1_000_000 || request.outcome !== 'committed' || !f.intents.has(wid)) continue
    const first = (f.runsByWid.get(wid) ?? [])[0]
    const committed = request.doneAt
    const started = first?.start ?? f.history.phase.end
    if (started - committed < STALL) continue
    const waiting = minus([committed + 1000, started], [...excused(f, f.messageIds(wid), request), ...inTurn(f, wid, committed, started)])
    // the first stretch of the wait in which one process was free all along
    let best
    for (const part of waiting) {
      for (const p of producers) {
        for (const [a, b] of freeIntervals(f, p, runs, part)) if (b - a >= IDLE && (!best || a < best.from)) best = { pid: p.pid, from: a, to: b }
      }
    }
    if (!best) continue
    violations.push({
      wid, pids: [best.pid],
      text: `${wid} (${message.service}) committed at ${f.time(committed)} and first started at ${f.time(first?.start)}${first ? ` (${f.describeRun(first)})` : ''}, ${((started - committed) / 1000).toFixed(1)} s later; from ${f.time(best.from)} to ${f.time(best.to)} process ${best.pid} served with ${slotsOf(f) === 1 ? 'no handler' : `fewer than ${slotsOf(f)} handlers`} running, the database was up and nothing else explains it${brokerAt(f, best)}`
    })
  }
  return [...violations, ...requestStalls(f, runs)].map(v => ({ ...v, invariant: 'I15', title: 'no queue stalls another: a message that can run waits only while every process is busy or away' }))
}

/**
 * The app's own requests: an enqueue that takes STALL or longer while its process ran no handler of the remote log
 * for IDLE of it was held up by something of the plugin's that the log does not show (on SQLite: the relay's
 * transaction holding the one write lock while its XADD waited for a frozen Redis, seed 746). Requests with large
 * payloads, and SQLite's lock held by the app's import, are excused; so is whatever excuses a message's wait.
 */
function requestStalls(f, runs) {
  const violations = []
  const heavy = f.history.requests.filter(big).map(r => [r.sentAt, r.doneAt + 1000])
  for (const request of f.history.requests) {
    if (request.kind !== 'enqueue' || request.outcome === 'skipped' || big(request) || !(request.doneAt - request.sentAt >= STALL)) continue
    const p = f.processOf(request.pid)
    if (!p) continue
    const holes = [...excused(f, new Set(), request), ...(f.plan.variant.db === 'sqlite' ? heavy : [])]
    const idle = { ...f.plan, variant: { ...f.plan.variant, db: 'sqlite' } } // no handler running: nothing of the log held it up
    const quiet = minus([request.sentAt + 1000, request.doneAt], holes).flatMap(part => freeIntervals({ ...f, plan: idle }, p, runs, part))
    const stretch = quiet.find(([a, b]) => b - a >= IDLE)
    if (!stretch) continue
    violations.push({
      pids: [p.pid],
      text: `the app's enqueue request (${request.messages.map(m => m.wid).join(', ')}) to process ${p.pid} took ${((request.doneAt - request.sentAt) / 1000).toFixed(1)} s, from ${f.time(request.sentAt)} to ${f.time(request.doneAt)} (${request.outcome}); from ${f.time(stretch[0])} to ${f.time(stretch[1])} that process ran no handler, the database was up and nothing else explains it${brokerAt(f, { from: stretch[0], to: stretch[1] })}`
    })
  }
  return violations
}

/** What the broker went through meanwhile, for the reader of a violation. */
function brokerAt(f, { from, to }) {
  const faults = f.history.brokerFaults.filter(b => b.from <= to && (b.to ?? Infinity) >= from)
  return faults.length ? `; meanwhile the broker's ${faults.map(b => `${b.kind} from ${f.time(b.from)} to ${f.time(b.to)}`).join(', ')}` : ''
}

module.exports = { I15 }
