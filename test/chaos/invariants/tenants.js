const { TENANT_SERVICES, QUEUE_OF } = require('../variants')

/**
 * I8: no operator answer of one tenant shows another tenant's data. Each tenant's workload uses services of its own
 * (variants.js), so a service, queue or message of another one in an answer is a leak. I12: after a tenant is
 * unsubscribed, nothing of the plugin writes into it again or runs its messages.
 */

const MARGIN = 2000

function allowed(tenant) {
  const services = new Set(TENANT_SERVICES[tenant])
  return { services, queues: new Set([...services].map(s => QUEUE_OF[s])) }
}

function foreignIn(observation) {
  const { services, queues } = allowed(observation.tenant)
  const entries = Array.isArray(observation.body?.value) ? observation.body.value : []
  return entries.filter(e => (e.service && !services.has(e.service)) || (e.queue && !queues.has(e.queue)) || (e.target && !queues.has(e.target)))
}

function I8(f) {
  if (!f.plan.variant.tenants) return []
  const violations = []
  for (const o of f.history.observations) {
    if (o.status !== 200) continue
    const foreign = foreignIn(o)
    if (foreign.length) {
      violations.push({ text: `the operator of ${o.tenant} asked ${o.kind === 'dead' ? 'DeadOutboxMessages' : o.kind} at ${f.time(o.at)} and was shown another tenant's data: ${JSON.stringify(foreign.slice(0, 3))}${foreign.length > 3 ? ` (${foreign.length} entries)` : ''}` })
    }
  }
  return violations.map(v => ({ ...v, invariant: 'I8', title: "no operator call of one tenant returns another tenant's data" }))
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
