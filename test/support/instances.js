const { fork } = require('child_process')
const path = require('path')
const { dbConfig } = require('./postgres')
const { projectQueue } = require('./app')
const { waitingForOtherWriters } = require('../../lib/cap/database-options')

/**
 * Separate Node processes running the test app against one PostgreSQL database, for multi-instance suites.
 * Every process started here is stopped by its PID.
 */

/** Preloaded into a process whose wall clock is skewed (`clockSkew`, ms; see skewed-clock.js). */
const SKEWED_CLOCK = path.join(__dirname, 'skewed-clock.js')

/**
 * The environment of a process of the test app on `database`: an app instance's, or the CLI's beside one.
 * `database`: a database name on the run's PostgreSQL server, or a whole `cds.requires.db` object (SQLite file, private
 * server). `clockSkew`: the process's wall clock runs this many ms ahead (negative: behind).
 */
function environment(database, { name, queue = {}, requires = {}, deploy = false, env = {}, clockSkew }) {
  const db = typeof database === 'string' ? dbConfig(database) : { ...database }
  // Processes sharing a SQLite file wait for each other's writes, as the CLI does: node:sqlite (cds 10) would fail
  // at once with "database is locked" (multitenancy-recovery's doomed process then never held a message in CI).
  waitingForOtherWriters(db)
  const config = { requires: { ...requires, db, queue: { ...projectQueue(), ...queue } } }
  const preload = [env.NODE_OPTIONS ?? process.env.NODE_OPTIONS, `--require ${SKEWED_CLOCK}`].filter(Boolean).join(' ')
  const skewed = clockSkew ? { NODE_OPTIONS: preload, CLOCK_SKEW: String(clockSkew) } : {}
  return { ...process.env, ...env, ...skewed, CDS_CONFIG: JSON.stringify(config), INSTANCE: name, TEST_APP_DEPLOY: deploy ? 'yes' : 'no' }
}

/**
 * Starts an app instance (test/support/instance.js, or `script`: cap-instance.js serves CAP's built-in queue without
 * the plugin); resolves once it serves, with `child.url`. `deploy: true` deploys the model first; `execArgv`: Node's
 * options for the process (e.g. `--max-old-space-size=512`, a small container's heap).
 */
function startInstance(database, options) {
  const script = options.script ?? 'instance.js'
  const child = fork(path.join(__dirname, script), [], { env: environment(database, options), silent: true, execArgv: options.execArgv })
  child.output = ''
  const collect = chunk => (child.output += chunk)
  child.stdout.on('data', collect)
  child.stderr.on('data', collect)
  return new Promise((resolve, reject) => {
    const ready = chunk => {
      const url = String(chunk).match(/listening on (http:\/\/\S+)/)?.[1]
      if (url) resolve(Object.assign(child, { url }))
    }
    child.stdout.on('data', ready)
    child.once('exit', code => reject(new Error(`instance ${options.name} exited (${code}) before serving:\n${child.output}`)))
  })
}

/** Stops an instance by its PID: SIGTERM (graceful cds shutdown), SIGKILL if it is still running after `grace` ms. */
async function stopInstance(child, grace = 15000) {
  if (!child || child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise(resolve => child.once('exit', resolve))
  process.kill(child.pid, 'SIGTERM')
  const timer = setTimeout(() => process.kill(child.pid, 'SIGKILL'), grace)
  await exited
  clearTimeout(timer)
}

/**
 * Runs test/support/enqueue.js: `count` `record` messages committed by a process of its own, which then exits.
 * `deploy: true` deploys the model first (a database no instance has served yet).
 */
function enqueueFromAnotherProcess(database, count, env = {}, { deploy = false } = {}) {
  const child = fork(path.join(__dirname, 'enqueue.js'), [], {
    env: { ...environment(database, { name: 'enqueuer', env, deploy }), COUNT: String(count) },
    silent: true
  })
  let output = ''
  child.stdout.on('data', chunk => (output += chunk))
  child.stderr.on('data', chunk => (output += chunk))
  return new Promise((resolve, reject) =>
    child.once('exit', code => (code === 0 ? resolve() : reject(new Error(`enqueuer exited with ${code}:\n${output}`))))
  )
}

/** Starts several instances on one database: the first deploys the model, the others then start side by side. */
async function startInstances(database, [first, ...others]) {
  const started = [await startInstance(database, { ...first, deploy: true })]
  return started.concat(await Promise.all(others.map(options => startInstance(database, options))))
}

/**
 * Runs test/support/one-off.js with ONE_OFF=`action` (and `env`) against the database, or another `script` of this
 * folder (e.g. cap-task.js, CAP's built-in queue without the plugin); resolves when it exited 0. `clockSkew` as for
 * an instance.
 */
function runOneOff(database, action, { requires = {}, env = {}, script = 'one-off.js', clockSkew } = {}) {
  const child = fork(path.join(__dirname, script), [], {
    env: { ...environment(database, { name: 'one-off', requires, env, clockSkew }), ONE_OFF: action },
    silent: true
  })
  let output = ''
  child.stdout.on('data', chunk => (output += chunk))
  child.stderr.on('data', chunk => (output += chunk))
  return new Promise((resolve, reject) =>
    child.once('exit', code => (code === 0 ? resolve(output) : reject(new Error(`${script} ${action} exited with ${code}:\n${output}`))))
  )
}

/**
 * Runs test/support/failing-start.js (an app whose `served` handler fails with `failure`) on a deployed database and
 * resolves with its exit code, its output and how long it ran; a process still running after `limit` ms is killed
 * by its PID (code null).
 */
function startFailing(database, failure, limit) {
  const start = Date.now()
  const child = fork(path.join(__dirname, 'failing-start.js'), [], {
    env: { ...environment(database, { name: 'failing' }), FAIL_ON_SERVED: failure },
    silent: true
  })
  let output = ''
  child.stdout.on('data', chunk => (output += chunk))
  child.stderr.on('data', chunk => (output += chunk))
  const timer = setTimeout(() => process.kill(child.pid, 'SIGKILL'), limit)
  return new Promise(resolve =>
    child.once('exit', code => {
      clearTimeout(timer)
      resolve({ code, output, ms: Date.now() - start })
    })
  )
}

module.exports = { environment, startInstance, startInstances, stopInstance, enqueueFromAnotherProcess, runOneOff, startFailing }
