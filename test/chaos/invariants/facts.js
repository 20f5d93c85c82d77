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

function facts(result) {
  const { plan, history, final } = result
  const log = readRemoteLog(result.remoteLog)
  // the queue's messages to handlers of its own (the remote log's) apart from the events it relays to the broker
  const asked = new Map()
  const events = new Map()
  for (const request of history.requests) for (const m of request.messages) (m.service === 'broker' ? events : asked).set(m.wid, { message: m, request })
  const runs = runsOf(log)
  const runsByWid = groupBy([...runs.values()].flat(), r => r.wid)
  const f = {
    plan, history, final, log, asked, events, runs, runsByWid,
    ticks: runsOf(log, 'tick-start', 'tick-end'),
    intents: new Map(final.intents.filter(i => i.service !== 'broker').map(i => [i.wid, i])),
    eventIntents: new Map(final.intents.filter(i => i.service === 'broker').map(i => [i.wid, i])),
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
  f.consumerPids = new Set(history.processes.filter(p => p.app === 'consumer').map(p => p.pid))
  /** The process incarnation of a PID, and whether (and when) it died without a graceful stop. */
  f.processOf = pid => history.processes.find(p => p.pid === pid)
  f.diedAt = pid => {
    const p = f.processOf(pid)
    return p && (p.end === 'killed' || p.end === 'crashed') ? p.endedAt : undefined
  }
  /**
   * Why a process may have lost an attempt (of message `ID`) it ran from `from` to `to` without any defect, by what
   * the checker itself saw: it was killed while it held the message (the rows it held are read right after each
   * kill: a kill excuses no more than that) or crashed, it was paused (SIGSTOP) for longer than a lease could last,
   * the database was away (its renewals and outcome could not be written), or its event loop stalled (a lease can run
   * out under load). The plugin's own log lines excuse nothing (issue 31: a rule that believed "could not renew" and
   * "claim lost" let the plugin excuse itself). Undefined: no such excuse.
   */
  f.excuse = (pid, from, to, ID) => {
    const died = f.diedAt(pid)
    const kill = history.kills.find(k => k.pid === pid)
    const held = !ID || !kill || kill.held === null || kill.held.includes(ID)
    if (died !== undefined && died >= from - MARGIN && died <= to + MARGIN && held) return `its process ${pid} was killed at ${f.time(died)}${kill && ID ? ' holding it' : ''}`
    const paused = history.pauses.find(p => p.pid === pid && p.from <= to + MARGIN && (p.to ?? Infinity) >= from - MARGIN)
    if (paused) return `process ${pid} was paused from ${f.time(paused.from)} to ${f.time(paused.to)}`
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
