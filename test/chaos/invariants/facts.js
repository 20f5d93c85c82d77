const fs = require('fs')
const { readRemoteLog, runsOf } = require('../history')
const { queueSettings } = require('../queues')
const { QUEUE_OF } = require('../variants')

/**
 * The history of one seed, indexed for the invariants: what was asked (by workload id), what committed (the
 * `Intents` rows), what ran (the remote log's attempts, by message ID), what it left (effects, callbacks, rows),
 * and the faults that excuse a repeated remote effect.
 */

/** Cross-process comparisons of true times: processes read the same clock, through their own `performance`. */
const MARGIN = 100

const groupBy = (list, key) => {
  const map = new Map()
  for (const item of list) {
    const k = key(item)
    if (!map.has(k)) map.set(k, [])
    map.get(k).push(item)
  }
  return map
}

/** A `#succeeded` / `#failed` callback's row (its data is the original message's, workload id included). */
const isCallback = row => /\/#(succeeded|failed)$/.test(row.event ?? '')

/** Per process, the messages it logged it could not renew the lease of, or record the outcome of. */
function logged(history, pattern) {
  const found = new Map()
  for (const p of history.processes) {
    if (!fs.existsSync(p.log)) continue
    found.set(p.pid, new Set([...fs.readFileSync(p.log, 'utf8').matchAll(pattern)].map(m => m[1])))
  }
  return found
}

function facts(result) {
  const { plan, history, final } = result
  const log = readRemoteLog(result.remoteLog)
  const asked = new Map()
  for (const request of history.requests) for (const m of request.messages) asked.set(m.wid, { message: m, request })
  const runs = runsOf(log)
  const runsByWid = groupBy([...runs.values()].flat(), r => r.wid)
  const f = {
    plan, history, final, log, asked, runs, runsByWid,
    ticks: runsOf(log, 'tick-start', 'tick-end'),
    intents: new Map(final.intents.map(i => [i.wid, i])),
    effects: groupBy(final.effects, e => e.wid),
    callbacks: groupBy(final.callbacks, c => c.wid),
    rowsByWid: groupBy(final.rows.filter(r => r.wid && !r.task && !isCallback(r)), r => r.wid),
    callbackRows: groupBy(final.rows.filter(r => r.wid && isCallback(r)), r => r.wid),
    settings: queueSettings(plan.requires, result.maxAttempts),
    /** Every maxAttempts the default queue had during the seed: a death may have come under any of them. */
    maxAttemptsSeen: [queueSettings(plan.requires).Archive.maxAttempts, ...history.maxAttempts.map(m => m.value)],
    stalls: groupBy(log.stall, s => s.pid),
    heap: groupBy(log.heap, h => h.pid)
  }
  /** The message IDs a workload id had: from its runs, its intent (keyed messages) and its row. */
  f.messageIds = wid => new Set([...(runsByWid.get(wid) ?? []).map(r => r.ID), f.intents.get(wid)?.messageID, ...(f.rowsByWid.get(wid) ?? []).map(r => r.ID)].filter(Boolean))
  f.settingsOf = service => f.settings[service]
  f.tenantOf = wid => asked.get(wid)?.request.tenant
  f.unsubscribed = tenant => history.unsubscribes.some(u => u.tenant === tenant && u.status < 300 && u.status > 0)
  /** The process incarnation of a PID, and whether (and when) it died without a graceful stop. */
  f.processOf = pid => history.processes.find(p => p.pid === pid)
  f.diedAt = pid => {
    const p = f.processOf(pid)
    return p && (p.end === 'killed' || p.end === 'crashed') ? p.endedAt : undefined
  }
  f.lost = logged(history, /could not (?:renew the lease of|record the outcome of) message ([0-9a-f-]{36})/g)
  // the runner's own account of a claim another process took over while the handler ran (a renewal came too late)
  f.takenOver = logged(history, /message ([0-9a-f-]{36}): (?:claim lost while it ran|its claim was taken over or the row deleted while the handler ran)/g)
  const skewedDuring = (from, to) => history.processes.some(p => p.skew && p.startedAt <= to && (p.endedAt ?? Infinity) >= from)
  /**
   * Why a process may have lost an attempt (of message `ID`) it ran from `from` to `to` without any defect: it died
   * (kill -9, crash), the database was away (its renewals and outcome could not be written), its event loop stalled
   * (a lease can run out under load), or it logged that it could not renew the lease or record the outcome (the
   * README's "recovered when their leases expire") or that its claim was taken over while no clock was skewed.
   * Undefined: no such excuse.
   */
  f.excuse = (pid, from, to, ID) => {
    if (ID && f.lost.get(pid)?.has(ID)) return `process ${pid} could not renew the lease of message ${ID} or record its outcome (its log)`
    // a lease that ran out under load is lost like any other (I3 allows it); with a skewed clock involved it may be
    // the clock's doing (a lease judged by a process clock), which stays a violation
    if (ID && f.takenOver.get(pid)?.has(ID) && !skewedDuring(from, to)) return `process ${pid} lost its claim of message ${ID} while it ran, every clock true (its log)`
    const died = f.diedAt(pid)
    if (died !== undefined && died >= from - MARGIN && died <= to + MARGIN) return `its process ${pid} was killed at ${f.time(died)}`
    const outage = history.outages.find(o => o.from <= to && (o.to ?? Infinity) >= from)
    if (outage) return `PostgreSQL was restarted from ${f.time(outage.from)} to ${f.time(outage.to)}`
    const stall = (f.stalls.get(pid) ?? []).find(s => s.from <= to && s.at >= from)
    if (stall) return `process ${pid} stalled for ${stall.ms} ms at ${f.time(stall.at)}`
    return undefined
  }
  /** A true time relative to the start of the fault phase, for messages. */
  f.time = at => (at === undefined ? '?' : `${((at - history.phase.start) / 1000).toFixed(3)} s`)
  f.describeRun = r => `attempt ${r.attempt} by process ${r.pid}${f.processOf(r.pid)?.skew ? ` (clock ${f.processOf(r.pid).skew > 0 ? '+' : ''}${f.processOf(r.pid).skew / 1000} s)` : ''} from ${f.time(r.start)} to ${r.end === undefined ? '(no end)' : `${f.time(r.end)}: ${r.outcome}`}${r.aborts.length ? ` [signal: ${r.aborts.join(', ')}]` : ''}`
  /** Whether an operator action of `tenant` could have touched a message of `service` with `ID`. */
  f.covers = (action, { ID, service, tenant }) => {
    if (action.tenant !== tenant) return false
    if (action.ids) return action.ids.includes(ID)
    if (action.action === 'purge') return true
    const filter = action.filter ?? {}
    return (!filter.queue || filter.queue === QUEUE_OF[service]) && (!filter.service || filter.service === service) && !filter.event
  }
  f.succeeded = action => (action.status >= 200 && action.status < 300) || action.code === 0
  return f
}

module.exports = { facts, groupBy, isCallback, MARGIN }
