/**
 * One process of the multi-process measurements on PostgreSQL (BENCH_ROLE):
 * - 'fill': deploys the model and writes BENCH_COUNT pending `noop` messages, then exits;
 * - 'dispatch': serves Bench; on 'go' drains: the plugin by starting its runner ('served'), CAP by flush() back to back
 *   until the table is empty (CAP has no wake-up across processes); reports each `ping` handler start, and on
 *   'report' the plugin's claims: how many, how many rows, how long each claim transaction took;
 * - 'enqueue': commits one `ping` per 'ping' command and reports the commit instant; for the plugin its own runner is
 *   stopped, so the message must be dispatched by another process.
 * Talks to the parent over IPC; the parent stops it by PID.
 */
const path = require('path')
const { performance } = require('perf_hooks')
const { REPO, boot, serve, impl, isPlugin } = require('./support/app')
const { wallClock, fillBacklog, pending } = require('./support/messages')
const { percentile } = require('./support/stats')

const role = process.env.BENCH_ROLE
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

async function drainWithCap(cds, queued) {
  while ((await pending(cds)) > 0) await Promise.race([queued.flush(), sleep(1000)])
}

/** Times every claim of the plugin's store (bench-side instrumentation: the plugin itself is unchanged). */
function timeClaims() {
  const { NativeStore } = require(path.join(REPO, 'lib', 'store', 'native'))
  const { PortableStore } = require(path.join(REPO, 'lib', 'store', 'portable'))
  const claims = { durations: [], rows: 0 }
  for (const Store of [NativeStore, PortableStore]) {
    const claim = Store.prototype.claim
    Store.prototype.claim = async function (...args) {
      const start = performance.now()
      const rows = await claim.apply(this, args)
      claims.durations.push(performance.now() - start)
      claims.rows += rows.length
      return rows
    }
  }
  return () => {
    const { durations, rows } = claims
    const total = durations.reduce((a, b) => a + b, 0)
    return { claims: durations.length, rows, totalMs: total, p50: percentile(durations, 50), p99: percentile(durations, 99) }
  }
}

async function dispatcher(cds, srv, queued) {
  const claims = impl() === 'plugin' ? timeClaims() : undefined
  process.on('message', command => command.report && process.send({ report: claims?.() ?? null }))
  srv.on('noop', () => {})
  srv.on('ping', req => process.send({ pinged: req.data.n, at: wallClock() }))
  process.on('message', async command => {
    if (command.go === undefined) return
    if (isPlugin(impl())) await serve(cds)
    else await drainWithCap(cds, queued)
  })
}

async function enqueuer(cds, queued) {
  if (isPlugin(impl())) await require(path.join(REPO, 'lib', 'plugin')).eventQueues().runner.stop()
  process.on('message', async command => {
    if (command.ping === undefined) return
    let at
    await cds.tx(async () => {
      cds.context.on('succeeded', () => (at = wallClock()))
      await queued.emit('ping', { n: command.ping })
    })
    process.send({ committed: command.ping, at })
  })
}

async function main() {
  setInterval(() => {}, 60_000) // alive until stopped: CAP's timers are not referenced
  const { cds, srv, queued } = await boot({ deploy: role === 'fill' })
  if (role === 'fill') {
    await fillBacklog(cds, 'noop', Number(process.env.BENCH_COUNT))
    return process.send({ filled: true }, () => process.exit(0))
  }
  if (role === 'dispatch') await dispatcher(cds, srv, queued)
  else await enqueuer(cds, queued)
  process.send({ ready: true })
}

main().catch(e => {
  console.error(e)
  process.exit(1)
})
