const fs = require('fs')
const path = require('path')

/**
 * Boots the bench app (bench/app) in this process, as one of the contenders:
 * - 'plugin': cds-event-queues loaded through CDS_PLUGINS (the app's package.json does not list it, so the other
 *   run gets CAP's built-in queue from @sap/cds/srv/outbox and @sap/cds/libx/queue);
 * - 'portable': the plugin with `store: 'portable'`: CQL only, the path every database without a fast path (SAP HANA)
 *   runs, on the same SQLite file and PostgreSQL server;
 * - 'baseline': the same, from the built checkout at BENCH_BASELINE (another version of the plugin, to compare);
 * - 'cap': CAP's built-in queue, with legacyLocking: false (cds 9 defaults to true; false is CAP 10's behaviour and
 *   lets handler writes and the row deletion commit together, as the plugin always does).
 * The database comes from BENCH_DB (JSON `cds.requires.db`). The runner is not started here: see `serve()`.
 */

const REPO = path.join(__dirname, '..', '..')
const APP = path.join(REPO, 'bench', 'app')

/** Model references like `cds-event-queues/db/outbox` resolve from the app, as in a project that installed the plugin. */
function linkPackage() {
  const link = path.join(APP, 'node_modules', 'cds-event-queues')
  if (fs.existsSync(link)) return
  fs.mkdirSync(path.dirname(link), { recursive: true })
  fs.symlinkSync(path.relative(path.dirname(link), REPO), link, 'dir')
}

/** The environment of a process that runs `impl` against `db` (plain JSON: passed on to child processes). */
function environment(impl, db, extra = {}) {
  const queue = impl === 'cap'
    ? { kind: 'persistent-queue', legacyLocking: false }
    // no timer-driven passes in the measurements: commits, flush() and NOTIFY drive the runner; BENCH_QUEUE adds options
    : { pollInterval: '1h', ...JSON.parse(process.env.BENCH_QUEUE || '{}'), ...(impl === 'portable' ? { store: 'portable' } : {}) }
  const env = { ...process.env, ...extra, BENCH_IMPL: impl, CDS_CONFIG: JSON.stringify({ requires: { db, queue } }) }
  const plugin = { plugin: REPO, portable: REPO, baseline: process.env.BENCH_BASELINE }[impl]
  if (plugin) env.CDS_PLUGINS = JSON.stringify({ 'cds-event-queues': { impl: path.join(plugin, 'cds-plugin.js') } })
  else delete env.CDS_PLUGINS
  return env
}

/** Loads plugins and model, connects (and deploys if asked), serves Bench without starting the plugin's runner. */
async function boot({ deploy = true } = {}) {
  linkPackage()
  process.chdir(APP)
  const cds = require('@sap/cds')
  await cds.plugins
  cds.model = cds.compile.for.nodejs(await cds.load('*'))
  const db = await cds.connect.to('db')
  if (deploy) await cds.deploy(cds.model).to(db)
  const srv = await cds.serve('Bench')
  const services = Array.isArray(srv) ? srv : [srv]
  const bench = services.find(s => s.name === 'Bench') ?? cds.services.Bench
  return { cds, srv: bench, queued: cds.queued(bench) }
}

/** What the 'served' event starts: the plugin's runner (and its LISTEN connection on PostgreSQL); nothing for CAP. */
async function serve(cds) {
  await cds.emit('served', cds.services)
}

/** The contenders that are this plugin (its runner starts on 'served'), as opposed to CAP's built-in queue. */
const isPlugin = impl => impl === 'plugin' || impl === 'portable' || impl === 'baseline'

module.exports = { REPO, APP, environment, boot, serve, isPlugin, impl: () => process.env.BENCH_IMPL }
