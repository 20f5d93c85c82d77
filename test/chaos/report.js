const fs = require('fs')

/** What a seed did, and its violations with the logs of the processes involved. */

const LOG_TAIL = 40

function tail(file, lines = LOG_TAIL) {
  if (!fs.existsSync(file)) return '(no log)'
  const all = fs.readFileSync(file, 'utf8').trimEnd().split('\n')
  return all.slice(-lines).map(l => `    ${l}`).join('\n')
}

function figures(result) {
  const { history, final } = result
  const messages = history.requests.reduce((n, r) => n + r.messages.length, 0)
  const committed = final.intents.length
  const faults = {
    kills: history.kills.length,
    terminations: history.processes.filter(p => p.end === 'terminated').length,
    skewed: history.skews.length,
    'postgres restarts': history.outages.length,
    'maxAttempts changes': history.maxAttempts.length,
    'operator actions': history.operator.length,
    'of them CLI': history.operator.filter(a => a.via === 'cli').length,
    pauses: history.pauses.length,
    'consumer kills': history.consumerKills.length,
    'broker freezes': history.brokerFaults.filter(b => b.kind === 'freeze').length,
    'broker kills': history.brokerFaults.filter(b => b.kind === 'kill').length,
    'broker password changes': history.brokerFaults.filter(b => b.kind === 'password').length
  }
  const consumer = final.consumer && {
    events: history.requests.reduce((n, r) => n + r.messages.filter(m => m.service === 'broker').length, 0),
    committed: final.intents.filter(i => i.service === 'broker').length,
    applied: final.consumer.applied.length,
    redeliveries: final.consumer.receipts.reduce((n, r) => n + (r.scope.endsWith('inbox:messaging') ? r.duplicates : 0), 0),
    credits: history.credits.length,
    drained: final.consumer.drained
  }
  return { messages, committed, dead: Object.values(final.visible).reduce((n, ids) => n + ids.length, 0), faults, drained: final.drained, consumer }
}

function printSeed(result, violations, out = console.log) {
  const { seed, plan, history, dir } = result
  const fig = figures(result)
  const faults = Object.entries(fig.faults).filter(([, n]) => n).map(([k, n]) => `${n} ${k}`).join(', ')
  out(`  ${plan.variant.name}, ${plan.slots.length} process(es), ${plan.duration / 1000} s of faults; ${fig.messages} messages (${fig.committed} committed), ${faults || 'no faults'}; ${fig.dead} dead letters at the end; ${fig.drained.drained ? `drained in ${(fig.drained.ms / 1000).toFixed(1)} s` : 'NOT drained'}`)
  const c = fig.consumer
  if (c) out(`  consumer half: ${plan.consumer.slots.length} consumer process(es), Redis ${plan.consumer.persistence ? 'with' : 'without'} its append-only file, claimAfter ${plan.consumer.claimAfter}${plan.consumer.deliverTwice ? ", deliver: 'twice'" : ''}; ${c.events} events (${c.committed} committed), ${c.applied} applied, ${c.redeliveries} redeliveries dropped by the inbox, ${c.credits} @idempotent calls; ${c.drained?.drained ? `drained in ${(c.drained.ms / 1000).toFixed(1)} s` : 'NOT drained'}`)
  for (const note of history.notes) out(`  note: ${note}`)
  const outcomes = {}
  for (const r of history.requests) outcomes[r.outcome] = (outcomes[r.outcome] ?? 0) + 1
  out(`  requests: ${Object.entries(outcomes).map(([k, n]) => `${n} ${k}`).join(', ')}`)
  const failures = new Map()
  for (const r of history.requests.filter(r => r.outcome === 'failed')) {
    const text = `${r.status} ${String(JSON.stringify(r.body?.error?.message ?? r.body)).slice(0, 120)}`
    failures.set(text, (failures.get(text) ?? 0) + 1)
  }
  for (const [text, n] of failures) out(`  note: ${n} request(s) failed with ${text}`)
  if (!violations.length) return
  const byInvariant = new Map()
  for (const v of violations) byInvariant.set(v.invariant, [...(byInvariant.get(v.invariant) ?? []), v])
  for (const [invariant, list] of byInvariant) {
    out(`  ✗ seed ${seed} violates ${invariant} (${list[0].title}): ${list.length} time(s)`)
    for (const v of list.slice(0, 10)) out(`    - ${v.text}`)
    if (list.length > 10) out(`    … ${list.length - 10} more`)
  }
  const pids = new Set(violations.flatMap(v => v.pids ?? []))
  const logs = history.processes.filter(p => !pids.size || pids.has(p.pid))
  for (const p of logs.slice(0, 6)) out(`  log of process ${p.pid} (${p.slot}${p.skew ? `, clock ${p.skew} ms` : ''}, ${p.end ?? 'running'}), last ${LOG_TAIL} lines (${p.log}):\n${tail(p.log)}`)
  out(`  replay: CHAOS_SEED=${seed} npm run test:chaos   (logs and the remote log kept in ${dir})`)
}

module.exports = { printSeed, figures }
