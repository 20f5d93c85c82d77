const { random } = require('./random')
const { VARIANTS, TENANT_SERVICES, ALL_SERVICES } = require('./variants')
const { consumerHalf } = require('./consumer-plan')

/**
 * The plan of one seed: the variant, the queue options that differ from the app's package.json, and the timed
 * events of the fault phase — workload, faults and operator actions. The same seed always gives the same plan; what
 * the processes make of it depends on timing, which the history records.
 *
 * A plan belongs to its generator: 22, issue 22's (one app, its queue), and 31, which adds the consumer half
 * (consumer-plan.js) to every single-tenant seed. Each part draws from a stream of its own, so generator 31 plans
 * the same workload, faults and operators as 22 for a seed, and adds its half; the seeds found with 22 keep meaning
 * what they meant (seeds.json says each seed's generator).
 */

const GENERATORS = [22, 31]
const LATEST = 31

const VARIANT_WEIGHTS = [['sqlite', 2], ['sqlite-portable', 2], ['postgres', 3], ['postgres-portable', 2], ['mtx', 1.5], ['mtx-portable', 1]]
const SLOTS = ['A', 'B', 'C']
const KEYS = { Orders: ['o1', 'o2', 'o3', 'o4', 'o5', 'o6'], Ledger: ['l1', 'l2', 'l3', 'l4'] }
const MB = 1024 * 1024

/** What one `work` message is asked to do, by the service it goes to. */
function message(r, service, wid) {
  const m = { wid, service }
  if (r.chance(0.5)) m.send = true
  if (KEYS[service]) m.orderKey = r.pick(KEYS[service])
  switch (service) {
    case 'Orders':
      m.fail = r.weighted([[0, 70], [1, 15], [2, 10], [6, 5]])
      if (r.chance(0.2)) m.delay = r.int(1000, 6000)
      break
    case 'Ledger':
      m.fail = r.weighted([[0, 75], [1, 15], [5, 5]])
      if (r.chance(0.05)) m.mode = 'unrecoverable'
      break
    case 'Mailer':
      m.mode = r.weighted([['ok', 55], ['hang', 25], ['slow', 20]])
      // a hang lasts handlerTimeout and then the lease: hanging once is enough
      m.fail = m.mode === 'hang' ? 1 : r.weighted([[0, 75], [2, 20], [9, 5]])
      break
    case 'Billing':
      m.fail = r.weighted([[0, 90], [1, 10]])
      break
    case 'Archive':
      m.size = r.weighted([[0, 70], [r.int(10_000, 300_000), 20], [r.int(1 * MB, 3.5 * MB), 10]])
      m.fail = r.weighted([[0, 75], [1, 15], [9, 10]])
      if (r.chance(0.1)) m.mode = 'unrecoverable'
      break
    case 'Clerk':
      if (r.chance(0.4)) m.heldAgo = r.pick([2000, 5000])
      break
  }
  if (!m.mode && r.chance(0.2)) Object.assign(m, { mode: 'slow', ms: r.int(50, 1500) })
  if (m.mode === 'slow' && !m.ms) m.ms = r.int(100, 600)
  if (!m.fail) delete m.fail
  return m
}

/** From generator 31 on, tenants t2 and t3 queue calls of Clerk too: the default queue then holds every tenant's rows. */
function sharedQueue(r, { tenants, duration }) {
  const events = []
  let n = 0
  for (let at = r.int(200, 800); at < duration; at += r.int(600, 1500)) {
    const tenant = r.pick(tenants.filter(t => t !== 't1'))
    events.push({ at, kind: 'enqueue', tenant, messages: Array.from({ length: r.int(1, 3) }, () => ({ wid: `s${++n}`, service: 'Clerk' })), rollback: false })
  }
  return events
}

/** Requests to the app's `enqueue` action, 1–5 messages each, some rolled back. */
function workload(r, { tenants, duration }) {
  const events = []
  let n = 0
  for (let at = r.int(0, 300); at < duration; at += r.int(120, 500)) {
    const tenant = r.pick(tenants)
    const services = (tenant ? TENANT_SERVICES[tenant] : ALL_SERVICES).filter(s => s !== 'Ticker')
    const messages = Array.from({ length: r.int(1, 5) }, () => message(r, r.pick(services), `w${++n}`))
    events.push({ at, kind: 'enqueue', tenant, messages, rollback: r.chance(0.15) })
  }
  return events
}

/**
 * Large payloads: `burst` delayed messages of 3 MB that become due together (what one claim reads), or `dead` ones
 * that fail at once and pile up as dead letters for an operator's bulk action.
 */
function bigPayloads(r, { tenants, duration }) {
  const tenant = tenants.includes('t1') ? 't1' : undefined
  const kind = r.weighted([['none', 80], ['burst', 10], ['dead', 10]])
  if (kind === 'none') return []
  const count = kind === 'burst' ? 110 : 150
  const start = r.int(2000, duration / 3)
  const events = []
  for (let i = 0; i < count; i += 5) {
    const messages = Array.from({ length: 5 }, (_, j) => {
      const m = { wid: `big${i + j}`, service: 'Archive', size: 3 * MB }
      return kind === 'burst' ? { ...m, delay: 8000 - (i / 5) * 150 } : { ...m, mode: 'unrecoverable' }
    })
    events.push({ at: start + (i / 5) * 150, kind: 'enqueue', tenant, messages, rollback: false })
  }
  if (kind === 'dead') events.push({ at: start + 8000, kind: 'operator', via: 'odata', action: r.pick(['deleteAll', 'reviveAll']), filter: { queue: 'queue' }, tenant })
  return events
}

/** A recurring task of Ticker: scheduled, re-scheduled with a new version, maybe unscheduled and scheduled again. */
function tasks(r, { tenants, duration }) {
  const tenant = tenants.includes('t1') ? 't1' : undefined
  if (tenants[0] && !tenant) return []
  const events = [{ at: r.int(1000, 3000), kind: 'schedule', tenant, task: 'tickA', every: r.pick(['1s', '2s']), version: 1, ms: r.pick([0, 300]) }]
  // an app upgraded from CAP's built-in queue: its row of the same task is there already
  if (r.chance(0.4)) events.push({ at: 0, kind: 'legacyTask', tenant, task: 'tickA', every: 1000 })
  if (r.chance(0.6)) events.push({ at: r.int(5000, duration - 5000), kind: 'schedule', tenant, task: 'tickA', every: r.pick(['1s', '3s']), version: 2, ms: 0 })
  if (r.chance(0.5)) {
    const at = r.int(duration / 2, duration - 2000)
    events.push({ at, kind: 'unschedule', tenant, task: 'tickA' })
    if (r.chance(0.5)) events.push({ at: at + r.int(500, 1500), kind: 'schedule', tenant, task: 'tickA', every: '1s', version: 3, ms: 0 })
  }
  if (r.chance(0.4)) events.push({ at: r.int(0, duration / 2), kind: 'schedule', tenant, task: 'tickB', every: '2s', version: 1, ms: 500 })
  return events
}

/** Rows in CAP's format written by another writer: a bulk import for a few keys of Orders, behind a failing head. */
function foreignRows(r, { tenants, duration }) {
  if (tenants[0] || !r.chance(0.2)) return []
  const count = r.int(1100, 1400)
  const keys = ['f1', 'f2', 'f3']
  const rows = Array.from({ length: count }, (_, i) => ({ wid: `imp${i}`, service: 'Orders', orderKey: keys[i % keys.length], fail: i < keys.length ? 2 : undefined }))
  return [{ at: r.int(1000, duration / 2), kind: 'import', rows }]
}

/**
 * Faults, within a budget of process restarts: a start takes seconds on a loaded machine, and a process alone (SQLite)
 * serves nothing meanwhile. A skewed clock costs two restarts (on and off), a new maxAttempts one per process.
 */
function faults(r, { variant, slots, duration }) {
  const alone = slots.length === 1
  const events = []
  const at = () => r.int(1000, duration - 3000)
  let budget = alone ? 2 : 4
  if (r.chance(0.3) && budget >= slots.length) {
    events.push({ at: r.int(duration / 3, duration - 2000), kind: 'maxAttempts', value: r.int(2, 6) })
    budget -= slots.length
  }
  while (budget > 0) {
    const kind = r.weighted([['kill', 5], ['terminate', 2], ['skew', budget >= 2 ? 3 : 0]])
    const slot = r.pick(slots)
    if (kind === 'kill') events.push({ at: at(), kind, slot, down: r.int(300, alone ? 1500 : 4000) })
    if (kind === 'terminate') events.push({ at: at(), kind, slot, down: r.int(200, 2000) })
    if (kind === 'skew') events.push({ at: at(), kind, slot, skew: r.pick([-60_000, 60_000, 45_000]), hold: r.int(3000, 12_000) })
    budget -= kind === 'skew' ? 2 : 1
  }
  if (variant.db === 'postgres' && r.chance(0.4)) events.push({ at: at(), kind: 'pgRestart', down: r.int(1000, 4000) })
  return events
}

/**
 * Operators act in the second part of the phase, when there are dead letters to act on. On SQLite the CLI runs
 * beside the app more often: its write while a handler's transaction reads is what issue 22's defect 7 is about.
 */
function operators(r, { variant, tenants, duration }) {
  const events = []
  const cli = !variant.tenants
  const cliShare = variant.db === 'sqlite' ? 0.7 : 0.4
  for (let i = r.int(4, 12); i > 0; i--) {
    const tenant = r.pick(tenants)
    const action = r.weighted([['revive', 30], ['delete', 30], ['reviveAll', 10], ['deleteAll', 10], ['purge', cli ? 8 : 0]])
    const via = action === 'purge' ? 'cli' : cli && r.chance(cliShare) ? 'cli' : 'odata'
    const filter = action.endsWith('All') ? r.pick([{ queue: r.pick(['Orders', 'Ledger', 'remote', 'queue']) }, { service: r.pick(['Archive', 'Mailer', 'Ledger']) }, {}]) : undefined
    events.push({ at: r.int(duration / 3, duration), kind: 'operator', via, action, filter, tenant, pick: r.next() })
  }
  if (variant.tenants) {
    for (let at = r.int(2000, 4000); at < duration; at += r.int(3000, 6000)) events.push({ at, kind: 'observe', tenant: r.pick(tenants) })
    if (r.chance(0.5)) events.push({ at: r.int(duration / 2, duration - 2000), kind: 'unsubscribe', tenant: 't3' })
  }
  return events
}

/** Queue options of this seed beyond the app's package.json (CDS_CONFIG). */
function options(r) {
  const requires = {}
  if (r.chance(0.4)) requires.Ledger = { outboxed: { deadLetterRetention: '1s' } }
  if (r.chance(0.3)) requires.queue = { deadLetterRetention: '2s' }
  return requires
}

function plan(seed, generator = LATEST) {
  if (!GENERATORS.includes(generator)) throw new Error(`chaos generator ${generator} is unknown: one of ${GENERATORS.join(', ')}`)
  const r = random(seed)
  const name = r.fork('variant').weighted(VARIANT_WEIGHTS)
  const variant = { name, ...VARIANTS[name] }
  const slots = SLOTS.slice(0, r.fork('slots').int(...variant.processes))
  const duration = r.fork('duration').int(20, 32) * 1000
  const tenants = variant.tenants ?? [undefined]
  const context = { variant, slots, duration, tenants }
  const big = bigPayloads(r.fork('big'), context)
  // large payloads are the subject of their own window: no fault interrupts their enqueueing and claiming
  const window = big.length ? [big[0].at - 1000, big[big.length - 1].at + 12_000] : [0, -1]
  const quiet = e => !['kill', 'terminate', 'skew', 'pgRestart', 'maxAttempts'].includes(e.kind) || e.at < window[0] || e.at > window[1]
  const half = generator >= 31 && !variant.tenants ? consumerHalf(r.fork('consumer'), context) : undefined
  // `deliver: 'twice'` delivers each run of a recurring task twice, and a task's handler has no ID of its run to be
  // idempotent by (its messageId is the task's row, the same for every run): such seeds schedule no task
  const scheduled = half?.consumer.deliverTwice ? [] : tasks(r.fork('tasks'), context)
  const events = [
    ...workload(r.fork('workload'), context),
    ...big,
    ...scheduled,
    ...foreignRows(r.fork('foreign'), context),
    ...faults(r.fork('faults'), context),
    ...operators(r.fork('operators'), context),
    ...(half?.events ?? []),
    ...(generator >= 31 && variant.tenants ? sharedQueue(r.fork('shared'), context) : [])
  ]
    .filter(quiet)
    .sort((a, b) => a.at - b.at)
  const requires = options(r.fork('options'))
  if (half?.consumer.deliverTwice) requires.queue = { ...requires.queue, deliver: 'twice' }
  return { seed: Number(seed), generator, variant, slots, duration, requires, consumer: half?.consumer, events }
}

module.exports = { plan, GENERATORS, LATEST }
