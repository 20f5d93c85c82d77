const { byQueue } = require('../queues')
const { pidOfClaim } = require('../state')

/**
 * I6: no row stays `processing` beyond its lease plus the poll interval once its owner is gone. The clock starts
 * when the owner ended and some process (and the database) was up to take the row over; a loaded machine gets
 * SLACK on top.
 */

const SLACK = 10_000

/** The first moment at or after `t` when a process served and the database was up. */
function takeoverPossible(f, t) {
  const serving = f.history.processes
    .filter(p => p.readyAt !== undefined && (p.endedAt === undefined || p.endedAt > t))
    .map(p => Math.max(p.readyAt, t))
  let at = Math.min(...serving)
  for (const o of f.history.outages) if (o.from <= at && (o.to ?? Infinity) >= at) at = o.to ?? Infinity
  return at
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
      const from = takeoverPossible(f, owner.endedAt)
      const deadline = from + settings.timeout + settings.pollInterval + SLACK
      if (at <= deadline) continue
      reported.add(`${claim.ID} ${pid}`)
      const row = f.final.rows.find(r => r.ID === claim.ID)
      const wid = row?.wid ?? [...f.runs.get(claim.ID) ?? []][0]?.wid
      const lease = claim.dueAt ? new Date(claim.dueAt / 1000).toISOString() : '?'
      violations.push({
        wid, ids: [claim.ID], pids: [pid],
        text: `message ${claim.ID}${wid ? ` (${wid})` : ''} of queue ${claim.target} was still claimed by process ${pid}${owner.skew ? ` (clock ${owner.skew > 0 ? '+' : ''}${owner.skew / 1000} s)` : ''} at ${f.time(at)}, ${((at - owner.endedAt) / 1000).toFixed(1)} s after it ${owner.end} at ${f.time(owner.endedAt)} (others could take it over from ${f.time(from)}; lease ${settings.timeout} ms + poll ${settings.pollInterval} ms + ${SLACK} ms slack); its lease says ${lease}`
      })
    }
  }
  return violations.map(v => ({ ...v, invariant: 'I6', title: "no row stays 'processing' beyond its lease plus the poll interval once its owner is gone" }))
}

module.exports = { I6 }
