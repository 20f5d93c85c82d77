const { byQueue } = require('../queues')
const { pidOfClaim } = require('../state')

/**
 * I6: no row stays `processing` beyond its lease plus the poll interval once its owner is gone. Two checks on the
 * samples of the claims taken every second: the lease a gone owner left in the row (`dueAt`) must end within
 * `timeout` (+ LEASE_MARGIN) of the owner's end, since it renewed no more after it; and the row must have been taken
 * over once its lease had run out and some process had served (with the database up) for the poll interval plus
 * STUCK — generous, because slots busy with a backlog take over nothing until one is free.
 */

/** The true clock and a process's `Date` on one host agree within this. */
const LEASE_MARGIN = 1000
const STUCK = 60_000

/** When some process served and the database was up: merged intervals [from, to). */
function servingIntervals(f) {
  const up = f.history.processes.filter(p => p.readyAt !== undefined && p.app !== 'consumer').map(p => [p.readyAt, p.endedAt ?? Infinity]).sort((a, b) => a[0] - b[0])
  const merged = []
  for (const [from, to] of up) {
    const last = merged[merged.length - 1]
    if (last && from <= last[1]) last[1] = Math.max(last[1], to)
    else merged.push([from, to])
  }
  // minus the outages
  return f.history.outages.reduce((intervals, o) => intervals.flatMap(([from, to]) => {
    const [a, b] = [o.from, o.to ?? Infinity]
    if (b <= from || a >= to) return [[from, to]]
    return [[from, a], [b, to]].filter(([x, y]) => y > x)
  }), merged)
}

/** When a row whose lease ran out at `expired` must have been taken over: after some process served poll + STUCK. */
function deadlineAfter(f, expired, poll) {
  for (const [from, to] of servingIntervals(f)) {
    const start = Math.max(from, expired)
    if (to - start >= poll + STUCK) return start + poll + STUCK
  }
  return Infinity
}

function I6(f) {
  const violations = []
  const reported = new Set()
  for (const { at, claims } of f.history.claimSamples) {
    for (const claim of claims.filter(c => c.status === 'processing')) {
      const pid = pidOfClaim(claim.claimedBy)
      const owner = pid && f.processOf(pid)
      if (!owner || owner.endedAt === undefined || owner.endedAt > at || reported.has(`${claim.ID} ${pid}`)) continue
      const settings = byQueue(f.settings, claim.target) ?? f.settings.Archive
      const lease = claim.dueAt / 1000
      const leaseEnd = owner.endedAt + settings.timeout
      const deadline = deadlineAfter(f, Math.min(lease, leaseEnd), settings.pollInterval)
      const wid = f.final.rows.find(r => r.ID === claim.ID)?.wid ?? (f.runs.get(claim.ID) ?? [])[0]?.wid
      const what = `message ${claim.ID}${wid ? ` (${wid})` : ''} of queue ${claim.target}, claimed by process ${pid}${owner.skew ? ` (clock ${owner.skew > 0 ? '+' : ''}${owner.skew / 1000} s)` : ''}, which ${owner.end} at ${f.time(owner.endedAt)}`
      if (lease > leaseEnd + LEASE_MARGIN) {
        reported.add(`${claim.ID} ${pid}`)
        violations.push({ wid, ids: [claim.ID], pids: [pid], text: `${what}: at ${f.time(at)} its lease in the row ends ${((lease - owner.endedAt) / 1000).toFixed(1)} s after its owner ended (${new Date(lease).toISOString()}), beyond the lease of ${settings.timeout} ms: the row stays claimed that long` })
      } else if (at > deadline) {
        reported.add(`${claim.ID} ${pid}`)
        violations.push({ wid, ids: [claim.ID], pids: [pid], text: `${what}: still claimed by it at ${f.time(at)}, though its lease had run out and some process had served for ${(settings.pollInterval + STUCK) / 1000} s by ${f.time(deadline)}` })
      }
    }
  }
  return violations.map(v => ({ ...v, invariant: 'I6', title: "no row stays 'processing' beyond its lease plus the poll interval once its owner is gone" }))
}

module.exports = { I6 }
