/**
 * `node bench/tenants.js` (part of `npm run bench`): multitenancy (README, Multitenancy), in the multitenant test app
 * (test/mt-app: @sap/cds-mtxs in process, a SQLite file per tenant) with BENCH_TENANTS subscribed tenants (100).
 * Measured in one process:
 * - finding the tenants with messages, what every poll of every instance runs: reading the register (the markers in
 *   t0), beside looking into every tenant's database (a claim in each, what a poll without the register would need),
 *   medians of 20;
 * - commit → handler of single messages in a quiet tenant while another tenant drains 5,000 (up to 20, one at a
 *   time, while the drain lasts), p50 and max.
 * The recovery of a killed process's backlog is measured by test/multitenancy/multitenancy-recovery.sqlite.test.js. It measures;
 * it does not pass or fail.
 */
const fs = require('fs')
const os = require('os')
const path = require('path')

const TENANTS = Number(process.env.BENCH_TENANTS ?? 100)
const REPS = 20
const MT_APP = path.join(__dirname, '..', 'test', 'mt-app')
const log = (...args) => console.error('[bench:tenants]', ...args)

async function child() {
  process.chdir(MT_APP)
  const cds = require('@sap/cds')
  const { median, percentile } = require('./support/stats')
  const served = new Promise(resolve => cds.once('listening', resolve))
  cds.exec('--port', '0')
  await served
  const ds = await cds.connect.to('cds.xt.DeploymentService')
  const tenants = Array.from({ length: TENANTS }, (_, i) => `b${i}`)
  for (const tenant of tenants) await ds.subscribe(tenant)
  log(`${TENANTS} tenants subscribed`)

  const { eventQueues } = require(path.join(__dirname, '..', 'lib', 'plugin'))
  const { TenantRegister } = require(path.join(__dirname, '..', 'lib', 'tenants', 'register'))
  const { inOwnTransaction } = require(path.join(__dirname, '..', 'lib', 'store'))
  const { runner, settings } = eventQueues()
  const register = new TenantRegister('t0', settings.appid, settings.runner.pollInterval)
  const time = async fn => {
    const start = performance.now()
    await fn()
    return performance.now() - start
  }
  const markers = [], everyTenant = []
  for (let i = 0; i < REPS; i++) {
    markers.push(await time(() => register.marked()))
    everyTenant.push(await time(async () => {
      for (const tenant of tenants) {
        await runner.tenants.run(tenant, () => inOwnTransaction(() => runner.store.claim('bench', Date.now(), Date.now() + 60_000, 10)))
      }
    }))
  }

  const work = await cds.connect.to('Work')
  const latencies = []
  let seen
  cds.unqueued(work).on('ping', req => seen(Date.now() - req.data.sent))
  const inTenant = (tenant, fn) => cds.tx({ tenant, user: new cds.User.Privileged() }, fn)
  await inTenant(tenants[0], async () => {
    for (let seq = 0; seq < 5000; seq++) await work.emit('record', { seq })
  })
  // only while the busy tenant still drains: a figure measured after it says nothing
  const draining = async () => (await inTenant(tenants[0], () => SELECT.one.from('cds.outbox.Messages').columns('count(1) as n'))).n > 0
  while (latencies.length < REPS && (await draining())) {
    const ran = new Promise(resolve => (seen = resolve))
    await inTenant(tenants[1], () => work.emit('ping', { sent: Date.now() }))
    latencies.push(await ran)
  }
  await new Promise(resolve =>
    process.send({ markers: median(markers), everyTenant: median(everyTenant), p50: percentile(latencies, 50), max: Math.max(...latencies), pings: latencies.length }, resolve)
  )
}

async function parent() {
  const { runOnce } = require('./support/processes')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'event-queues-bench-mt-'))
  const config = { requires: { db: { kind: 'sqlite', credentials: { url: path.join(dir, 'db.sqlite') } }, queue: { pollInterval: '5s' } } }
  try {
    const r = await runOnce('tenants.js', { ...process.env, BENCH_TENANTS_CHILD: 'yes', CDS_CONFIG: JSON.stringify(config) })
    console.log(`Multitenancy, ${TENANTS} subscribed tenants (SQLite, a file per tenant; medians of ${REPS}):\n`)
    console.log('| measure | figure |\n|---|---|')
    console.log(`| finding tenants with messages: read the register (markers in t0) | ${r.markers.toFixed(2)} ms per poll |`)
    console.log(`| the same by a claim in every tenant's database | ${r.everyTenant.toFixed(1)} ms per poll (${(r.everyTenant / r.markers).toFixed(0)}× the register) |`)
    console.log(`| commit → handler in a quiet tenant while another drains 5,000 | p50 ${r.p50} ms, max ${r.max} ms (${r.pings} messages, one at a time, during the drain) |`)
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

require('./support/processes').runScript('BENCH_TENANTS_CHILD', child, parent)
