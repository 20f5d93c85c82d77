const { byQueue } = require('../queues')
const { pidOfClaim } = require('../state')

/**
 * I6: no row stays `processing` beyond its lease plus the poll interval once its owner is gone. The lease runs out
 * at the latest `timeout` after the owner ended; then some process (and the database) must have been up for the
 * poll interval to take the row over. A loaded machine gets SLACK on top.
 */

const SLACK = 10_000

/** When some process served and the database was up: merged intervals [from, to). */
function servingIntervals(f) {
  const up = f.history.processes.filter(p => p.readyAt !== undefined).map(p => [p.readyAt, p.endedAt ?? Infinity]).sort((a, b) => a[0] - b[0])
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

/**
 * The latest a row claimed by a process that ended at `ended` may still be claimed: its lease has run out by
 * `ended + lease`, and then some process must have served (with the database up) for a poll interval and SLACK.
 */
function deadlineAfter(f, ended, lease, poll) {
  const expired = ended + lease
  for (const [from, to] of servingIntervals(f)) {
    const start = Math.max(from, expired)
    if (to - start >= poll + SLACK) return start + poll + SLACK
  }
  return Infinity
}

function I6(f) {
  const violations = []
  const reported = new Set()
  for (const { at, claims } of f.history.claimSamples) {
    for (const claim of claims) {
      const pid = pidOfClaim(claim.claimedBy)
      const owner = pid && f.processOf(pid)
      if (!owner || owner.endedAt === undefined || owner.endedAt > at || reported.has(`${claim.ID} ${pid}`)) continue
      const settings = byQueue(f.settings, claim.target) ?? f.settings.Archive
      const deadline = deadlineAfter(f, owner.endedAt, settings.timeout, settings.pollInterval)
      if (at <= deadline) continue
      reported.add(`${claim.ID} ${pid}`)
      const row = f.final.rows.find(r => r.ID === claim.ID)
      const wid = row?.wid ?? [...f.runs.get(claim.ID) ?? []][0]?.wid
      const lease = claim.dueAt ? new Date(claim.dueAt / 1000).toISOString() : '?'
      violations.push({
        wid, ids: [claim.ID], pids: [pid],
        text: `message ${claim.ID}${wid ? ` (${wid})` : ''} of queue ${claim.target} was still claimed by process ${pid}${owner.skew ? ` (clock ${owner.skew > 0 ? '+' : ''}${owner.skew / 1000} s)` : ''} at ${f.time(at)}, ${((at - owner.endedAt) / 1000).toFixed(1)} s after it ${owner.end} at ${f.time(owner.endedAt)} (by ${f.time(deadline)} its lease of ${settings.timeout} ms had run out and some process had served for the poll interval of ${settings.pollInterval} ms + ${SLACK} ms slack); its lease says ${lease}`
      })
    }
  }
  return violations.map(v => ({ ...v, invariant: 'I6', title: "no row stays 'processing' beyond its lease plus the poll interval once its owner is gone" }))
}

module.exports = { I6 }
