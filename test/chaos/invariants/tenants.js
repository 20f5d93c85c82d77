const { TENANT_SERVICES, SHARED_SERVICES, QUEUE_OF } = require('../variants')

/**
 * I8: no operator surface of one tenant shows another tenant's data — the operator service, the ops page's reads, the
 * CLI. Each tenant's workload uses services of its own (variants.js), so a service, queue or message of another one
 * in an answer is a leak; and no count exceeds the tenant's own rows. I12: after a tenant is
 * unsubscribed, nothing of the plugin writes into it again or runs its messages.
 */

const MARGIN = 2000

/** The services a tenant's workload uses; from generator 31 on every tenant also queues Clerk (the default queue). */
function allowed(tenant, generator) {
  const services = new Set([...TENANT_SERVICES[tenant], ...(generator >= 31 ? SHARED_SERVICES : [])])
  return { services, queues: new Set([...services].map(s => QUEUE_OF[s])) }
}

const entriesOf = observation => (Array.isArray(observation.body?.value) ? observation.body.value : [])

function foreignIn(observation, generator) {
  const { services, queues } = allowed(observation.tenant, generator)
  return entriesOf(observation).filter(e => (e.service && !services.has(e.service)) || (e.queue && !queues.has(e.queue)) || (e.target && !queues.has(e.target)))
}

/** Rows a count may include beyond the tenant's own seen before and after it: its messages committed meanwhile, and their callbacks. */
function slack(f, o) {
  const committed = f.history.requests.filter(r => r.tenant === o.tenant && r.outcome !== 'rolledBack' && r.doneAt >= o.sentAt - 1000 && r.sentAt <= o.at + 1000)
  return COUNT_SLACK + 2 * committed.reduce((n, r) => n + r.messages.length, 0)
}

/** Per queue, what an answer counts: pending + processing + dead of its rows (statistics, CLI status), per sample of lagHistory. */
function countsIn(o) {
  const totals = new Map()
  for (const e of entriesOf(o)) {
    if (!e.queue || e.pending === undefined) continue
    const key = e.at ? `${e.queue} ${e.at}` : e.queue
    totals.set(key, (totals.get(key) ?? 0) + Number(e.pending) + Number(e.processing ?? 0) + Number(e.dead ?? 0))
  }
  return totals
}

/**
 * Counts beyond the tenant's own rows: statistics() and the CLI's status counted against the tenant's rows per queue
 * read right before and right after (and what it committed meanwhile); the page's `$count` of dead letters against
 * all its rows; lag samples of the last hour against every message the tenant ever queued there (with callbacks and
 * tasks). Tenants share the default queue's name from generator 31 on, so a count of other tenants' rows shows.
 */
function overCounted(f, o) {
  if (!o.counts) return []
  const { before, after } = o.counts
  const own = q => Math.max(before[q] ?? 0, after[q] ?? 0)
  const found = []
  if (o.kind.includes('$count=true') && o.body?.['@odata.count'] !== undefined) {
    const all = Math.max(...[before, after].map(c => Object.values(c).reduce((a, b) => a + b, 0)))
    if (o.body['@odata.count'] > all + slack(f, o)) found.push(`$count ${o.body['@odata.count']} dead letters, while the tenant had ${all} rows in all`)
    return found
  }
  for (const [key, total] of countsIn(o)) {
    const [queue, at] = key.split(' ')
    if (at) {
      const ever = everQueued(f, o.tenant, queue)
      if (total > ever) found.push(`a lag sample of ${queue} at ${at} counts ${total} messages, more than the tenant ever queued there (${ever} with callbacks and tasks)`)
    } else if (total > own(queue) + slack(f, o)) {
      found.push(`${queue} counts ${total} messages, while the tenant's database had ${before[queue] ?? 0} before and ${after[queue] ?? 0} after the call`)
    }
  }
  return found
}

/** What a tenant may ever have had in a queue: every message of its requests that may have committed (an unsubscribed tenant's database, with its intents, is gone). */
function everQueued(f, tenant, queue) {
  const requests = f.history.requests.filter(r => r.tenant === tenant && !['rolledBack', 'skipped'].includes(r.outcome))
  const messages = requests.reduce((n, r) => n + r.messages.filter(m => QUEUE_OF[m.service] === queue).length, 0)
  return 2 * messages + COUNT_SLACK
}

/** Rows that may appear between a count and the reads around it beyond commits: scheduled tasks' rows, retries. */
const COUNT_SLACK = 5

function I8(f) {
  if (!f.plan.variant.tenants) return []
  const generator = f.plan.generator ?? 22
  const violations = []
  for (const o of f.history.observations) {
    if (o.surface === 'cli' && o.status !== 200) violations.push({ text: `the operator of ${o.tenant} ran the CLI's status at ${f.time(o.at)}, and it failed: ${o.output}` })
    if (o.status !== 200) continue
    const where = `${o.surface && o.surface !== 'odata' ? `${o.surface === 'page' ? 'the ops page read' : 'the CLI ran'} ` : 'asked '}${o.kind === 'dead' ? 'DeadOutboxMessages' : o.kind}`
    const foreign = foreignIn(o, generator)
    if (foreign.length) {
      violations.push({ text: `the operator of ${o.tenant} ${where} at ${f.time(o.at)} and was shown another tenant's data: ${JSON.stringify(foreign.slice(0, 3))}${foreign.length > 3 ? ` (${foreign.length} entries)` : ''}` })
    }
    const over = overCounted(f, o)
    if (over.length) violations.push({ text: `the operator of ${o.tenant} ${where} at ${f.time(o.at)} and was shown counts beyond the tenant's own: ${over.slice(0, 3).join('; ')}` })
  }
  return violations.map(v => ({ ...v, invariant: 'I8', title: "no operator surface of one tenant shows another tenant's data: names or counts" }))
}

function I12(f) {
  const violations = []
  for (const u of f.history.unsubscribes.filter(u => u.status >= 200 && u.status < 300)) {
    const late = [...f.runs.values()].flat().filter(r => r.tenant === u.tenant && r.start > u.doneAt + MARGIN)
    if (late.length) violations.push({ pids: [...new Set(late.map(r => r.pid))], text: `tenant ${u.tenant} was unsubscribed at ${f.time(u.doneAt)}, yet ${late.length} of its messages started later: ${late.slice(0, 3).map(f.describeRun).join('; ')}` })
    if (f.final.tenantFiles?.[u.tenant]) violations.push({ text: `tenant ${u.tenant} was unsubscribed at ${f.time(u.doneAt)} (its database deleted), yet its database file exists again after settling` })
  }
  return violations.map(v => ({ ...v, invariant: 'I12', title: 'after an unsubscribe nothing of the plugin writes into that tenant again' }))
}

module.exports = { I8, I12 }
