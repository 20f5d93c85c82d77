const { isDead, isBlocked } = require('../settle')
const { MARGIN, isCallback } = require('./facts')

/**
 * I1 nothing committed is lost and local effects happen exactly once; I2 nothing rolled back runs; I3 remote
 * effects at least once, and more only where a process died holding the message, stood still or lost the database;
 * I5 an attempt is charged only when it started.
 */

/** Outcomes after which the queue runs the message again (or it is dead): a next attempt is no duplicate. */
const FAILED = /^(fail|unrecoverable|error:|aborted:(HANDLER_TIMEOUT|SHUTDOWN|HANDED_BACK))/
/** Outcomes the README charges an attempt for: a failure, and an attempt cut off by handlerTimeout. */
const CHARGED = /^(fail|error:|aborted:HANDLER_TIMEOUT)/


/**
 * The evidence that a message was a dead letter at `before` or earlier (an operator may delete only those): its
 * #failed callback, an operator listing it as dead, an unrecoverable failure, or enough attempts that may have been
 * charged (failed, timed out, cut off by a kill) to reach the lowest maxAttempts its queue had — a lowered maxAttempts
 * makes a dead letter without a #failed callback.
 */
function deadBefore(f, wid, ids, before) {
  if ((f.callbacks.get(wid) ?? []).some(c => c.kind === 'failed' && c.at <= before + MARGIN)) return true
  if (f.history.observations.some(o => o.kind === 'dead' && o.at <= before + MARGIN && o.ids?.some(id => ids.has(id)))) return true
  const runs = [...ids].flatMap(id => f.runs.get(id) ?? []).filter(r => r.start <= before + MARGIN)
  if (runs.some(r => r.outcome === 'unrecoverable')) return true
  const charged = runs.filter(r => r.end === undefined || CHARGED.test(r.outcome)).length + f.history.kills.filter(k => k.held === null || [...ids].some(id => k.held.includes(id))).length
  const service = f.asked.get(wid)?.message.service
  const lowest = service === 'Ledger' ? f.settingsOf('Ledger').maxAttempts : Math.min(...f.maxAttemptsSeen)
  return charged >= lowest
}

/** How a committed message that left no effect and no row went: deleted by an operator or by retention, or lost. */
function deletion(f, wid, service) {
  const ids = f.messageIds(wid)
  const tenant = f.tenantOf(wid)
  const settings = f.settingsOf(service)
  if (settings?.retention && deadBefore(f, wid, ids, Infinity)) return `retention (${settings.retention} ms)`
  const action = f.history.operator.find(a =>
    ['delete', 'deleteAll', 'purge'].includes(a.action) && f.succeeded(a) && [...ids].some(ID => f.covers(a, { ID, service, tenant })) && deadBefore(f, wid, ids, a.to)
  )
  return action && `${action.via} ${action.action} at ${f.time(action.from)}`
}

function I1(f) {
  const violations = []
  const { rows, visible } = f.final
  for (const [wid, { message, request }] of f.asked) {
    const intent = f.intents.get(wid)
    const tenant = request.tenant
    if (f.unsubscribed(tenant)) continue // its database is gone (I12)
    if (!intent) {
      if (request.outcome === 'committed') violations.push({ wid, text: `${wid}: the app answered ${request.status} (committed) but its transaction's rows are not in the database` })
      continue
    }
    const effects = f.effects.get(wid) ?? []
    const left = f.rowsByWid.get(wid) ?? []
    const ids = [...f.messageIds(wid)]
    if (effects.length > 1) {
      violations.push({ wid, ids, text: `${wid} (${message.service}) ran ${effects.length} times in the database: ${effects.map(e => `attempt ${e.attempt} by process ${e.pid} at ${f.time(e.at)}`).join(', ')}` })
      continue
    }
    const row = left[0]
    const waiting = (f.callbackRows.get(wid) ?? []).filter(r => !isDead(r, f.settings))
    if (waiting.length) violations.push({ wid, ids: waiting.map(r => r.ID), text: `${wid} (${message.service}): its ${waiting.map(r => r.event.split('/')[1]).join(', ')} callback is still waiting after settling (attempts ${waiting[0].attempts}, status ${waiting[0].status ?? 'null'}, claimed by ${waiting[0].claimedBy ?? 'nobody'})` })
    if (effects.length === 1) {
      if (row) violations.push({ wid, ids, text: `${wid} (${message.service}) ran and committed, yet its row is still in the table (attempts ${row.attempts}, status ${row.status})` })
      const succeeded = (f.callbacks.get(wid) ?? []).filter(c => c.kind === 'succeeded').length
      const dead = (f.callbackRows.get(wid) ?? []).filter(r => isDead(r, f.settings))
      const state = dead.length ? `; it is a dead letter (attempts ${dead[0].attempts}, ${f.runs.has(dead[0].ID) ? 'started' : 'never started'})` : ''
      if (succeeded > 1 || (succeeded === 0 && !waiting.length)) violations.push({ wid, ids, text: `${wid} (${message.service}) succeeded, but its #succeeded callback ran ${succeeded} times in the database${state}` })
      continue
    }
    if (row && isDead(row, f.settings)) {
      if (!visible[tenant]?.includes(row.ID)) violations.push({ wid, ids, text: `${wid} (${message.service}) is a dead letter by CAP's columns (attempts ${row.attempts}) that the operator service does not list` })
      continue
    }
    if (row && isBlocked(row, rows, f.settings)) continue
    if (row) {
      violations.push({ wid, ids, text: `${wid} (${message.service}) is still waiting after settling: attempts ${row.attempts}, status ${row.status ?? 'null'}, claimed by ${row.claimedBy ?? 'nobody'}, due ${row.dueAt ? new Date(row.dueAt / 1000).toISOString() : 'never'}; runs: ${(f.runsByWid.get(wid) ?? []).map(f.describeRun).join('; ') || 'none'}` })
      continue
    }
    if (!deletion(f, wid, message.service)) {
      violations.push({ wid, ids, text: `${wid} (${message.service}) was committed and is gone without a committed effect, not deleted as a dead letter by an operator or retention; runs: ${(f.runsByWid.get(wid) ?? []).map(f.describeRun).join('; ') || 'none'}` })
    }
  }
  return violations.map(v => ({ ...v, invariant: 'I1', title: 'every committed message ran exactly once in the database, is a visible dead letter, or was deleted as one' }))
}

function I2(f) {
  const violations = []
  for (const [wid, { message, request }] of f.asked) {
    if (f.unsubscribed(request.tenant)) continue
    const committed = f.intents.has(wid)
    if (committed && request.outcome === 'rolledBack') violations.push({ wid, text: `${wid}: the app rolled its transaction back (409), yet its rows were committed` })
    if (committed) continue
    const traces = [
      (f.effects.get(wid) ?? []).length && `${f.effects.get(wid).length} effects`,
      (f.callbacks.get(wid) ?? []).length && `${f.callbacks.get(wid).length} callbacks`,
      (f.runsByWid.get(wid) ?? []).length && `runs: ${f.runsByWid.get(wid).map(f.describeRun).join('; ')}`,
      (f.rowsByWid.get(wid) ?? []).length && 'a row in the queue table'
    ].filter(Boolean)
    if (traces.length) violations.push({ wid, text: `${wid} (${message.service}, ${request.outcome}: ${request.status || request.error}) was not committed, yet left ${traces.join(', ')}` })
  }
  return violations.map(v => ({ ...v, invariant: 'I2', title: 'nothing of a rolled-back transaction runs' }))
}

function I3(f) {
  const violations = []
  for (const [wid, effects] of f.effects) {
    const [effect] = effects
    const run = (f.runsByWid.get(wid) ?? []).find(r => r.pid === effect.pid && r.attempt === effect.attempt && r.outcome === 'ok')
    if (!run) violations.push({ wid, text: `${wid}: its effect committed (attempt ${effect.attempt}, process ${effect.pid}) without a remote call that ended ok` })
  }
  const twice = f.plan.requires.queue?.deliver === 'twice'
  for (const [ID, runs] of f.runs) {
    for (let i = 0; i + 1 < runs.length; i++) {
      const [run, next] = [runs[i], runs[i + 1]]
      if (run.end !== undefined && run.end <= next.start + MARGIN && FAILED.test(run.outcome)) continue
      // `deliver: 'twice'`: the same attempt once more after it succeeded, which the idempotent handler sees through
      if (twice && isSecondDelivery(run, next)) continue
      const excuse = f.excuse(run.pid, run.start, next.start, ID)
      if (excuse) continue
      const why = run.end === undefined || run.end > next.start ? 'while it still ran' : run.outcome === 'ok' ? 'after it had succeeded' : `after it ended ${run.outcome}`
      violations.push({ wid: run.wid, ids: [ID], pids: [run.pid, next.pid], text: `${run.wid} (message ${ID}, ${run.service}) was called again ${why}, with no process dead, no outage and no stall to explain it: ${f.describeRun(run)}; then ${f.describeRun(next)}` })
    }
    const last = runs[runs.length - 1]
    if (last.end === undefined && !f.excuse(last.pid, last.start, Infinity)) {
      violations.push({ wid: last.wid, ids: [ID], pids: [last.pid], text: `${last.wid} (message ${ID}): an attempt never ended, though its process was not killed: ${f.describeRun(last)}` })
    }
  }
  return violations.map(v => ({ ...v, invariant: 'I3', title: 'remote effects at least once, more only where a process died or a lease was lost' }))
}

/**
 * The test mode's second delivery of a successful attempt: the same attempt, after it ended, changing nothing — or
 * not ending, its process killed while it ran (seed 2211: A was killed 2 ms into the second delivery of w81#succeeded;
 * a delivery that never ends without a kill is I3's "never ended"). (A first delivery may end `seen` too: a #failed
 * callback of a message that died again after a revival.)
 */
function isSecondDelivery(run, next) {
  const unchanged = next.outcome === 'seen' || next.end === undefined
  return (run.outcome === 'ok' || run.outcome === 'seen') && unchanged && next.attempt === run.attempt && next.start >= run.end - MARGIN
}

/** Attempts the queue may have charged without a remote call: claims lost with a killed process, CAP's columns. */
function unseenAttempts(f, row) {
  const kills = f.history.kills.filter(k => k.held === null || k.held.includes(row.ID)).length
  return kills + (f.asked.get(row.wid)?.message.heldAgo ? 1 : 0)
}

/** Whether an operator revived message `ID` (reset its attempts) between `from` and `to`. */
function revivedBetween(f, ID, wid, from, to) {
  const service = f.asked.get(wid)?.message.service
  return f.history.operator.some(a => a.action.startsWith('revive') && f.succeeded(a) && a.to >= from - MARGIN && a.from <= to + MARGIN && f.covers(a, { ID, service, tenant: f.tenantOf(wid) }))
}

function I5(f) {
  const violations = []
  for (const [ID, runs] of f.runs) {
    for (let i = 0; i + 1 < runs.length; i++) {
      const [run, next] = [runs[i], runs[i + 1]]
      if (!CHARGED.test(run.outcome ?? '') || next.attempt > run.attempt || revivedBetween(f, ID, run.wid, run.start, next.start)) continue
      // an outcome that could not be written (the process died, the database was away) is recovered by the lease
      if (f.excuse(run.pid, run.start, next.start, ID)) continue
      violations.push({ wid: run.wid, ids: [ID], pids: [run.pid, next.pid], text: `${run.wid} (message ${ID}): an attempt that ended ${run.outcome} was not charged — the next one is attempt ${next.attempt} again: ${f.describeRun(run)}; then ${f.describeRun(next)}` })
    }
  }
  for (const row of f.final.rows) {
    if (!row.wid || row.task || !f.asked.has(row.wid)) continue
    const runs = f.runs.get(row.ID) ?? []
    const what = isCallback(row) ? `the ${row.event.split('/')[1]} callback of ${row.wid}` : row.wid
    if (runs.some(r => r.outcome === 'unrecoverable')) continue
    // A revival resets dead letters only, and takes effect somewhere between its call and its answer (a CLI may wait
    // for SQLite's lock for seconds): the row's life since its last revival starts with the last run that restarted
    // at attempt 1 after a revival covering it had begun. A revival that found the row pending left its attempts, and
    // its runs go on counting up (seed 45: a reviveAll of its service between attempts 3 and 4).
    const revived = f.history.operator.filter(a => a.action.startsWith('revive') && f.succeeded(a) && f.covers(a, { ID: row.ID, service: f.asked.get(row.wid).message.service, tenant: row.tenant }))
    const restart = runs.findLastIndex((r, i) => i > 0 && r.attempt === 1 && revived.some(a => r.start >= a.from - MARGIN))
    const life = restart > 0 ? runs.slice(restart) : runs
    const started = life.length
    // a failure whose outcome could not be written (process died, database away) is not charged: its lease is
    const failed = life.filter(r => CHARGED.test(r.outcome ?? '') && !f.excuse(r.pid, r.start, r.end + 2000, row.ID)).length
    if (row.attempts < failed) {
      violations.push({ wid: row.wid, ids: [row.ID], text: `${what} (message ${row.ID}) is charged ${row.attempts} attempts, but ${failed} of its attempts failed or timed out${restart > 0 ? ' since its last revival' : ''}: ${life.map(f.describeRun).join('; ')}` })
    }
    const unseen = unseenAttempts(f, row)
    if (row.attempts > started + unseen) {
      const dead = isDead(row, f.settings) ? 'a dead letter' : 'a message'
      violations.push({ wid: row.wid, ids: [row.ID], text: `${what} (message ${row.ID}) is ${dead} charged ${row.attempts} attempts, but ${started} started${restart > 0 ? ' since its last revival' : ''}${unseen ? ` (+${unseen} a killed process may have lost unseen)` : ''}: ${runs.map(f.describeRun).join('; ') || 'no runs'}` })
    }
  }
  return violations.map(v => ({ ...v, invariant: 'I5', title: 'an attempt is charged when it started (and only then): a dead letter started maxAttempts attempts' }))
}

module.exports = { I1, I2, I3, I5, FAILED, isSecondDelivery }
