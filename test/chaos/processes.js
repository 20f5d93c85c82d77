const fs = require('fs')
const path = require('path')
const { fork } = require('child_process')
const { EventEmitter } = require('events')
const { now } = require('./app/srv/true-clock')

/**
 * The app processes of one seed: logical slots (A, B, C) whose incarnations the checker starts, kills (SIGKILL),
 * stops (SIGTERM, timed: I9) and restarts, each by its PID, each with a log file of its own. A process that exits
 * without the checker asking (an out-of-memory crash) is recorded and restarted, as a process manager would.
 */

const SCRIPT = path.join(__dirname, 'process.js')
const DEPLOY = path.join(__dirname, 'deploy.js')
const PRELOAD = path.join(__dirname, 'preload.js')
/** The heap every process gets: the figure of issue 22's defect 1. */
const MAX_OLD_SPACE_MB = 512
/** How long a process may take to serve, on a loaded machine, before the checker gives up on it. */
const START_TIMEOUT = 180_000
/** I9: beyond its `shutdownGrace`, how long a process may take to end after SIGTERM (disconnects, a busy machine). */
const TERM_SLACK = 30_000
/** Crashes restarted per slot before the checker leaves the slot down (a crash on every start). */
const RESTARTS_AFTER_CRASH = 2

/** Every fleet not yet stopped: an interrupted checker kills their processes (`killEverything`). */
const fleets = new Set()

class Fleet extends EventEmitter {
  /**
   * `app`: the folder of the app under test/chaos (`app`, the producer, or `consumer`); `env`: the processes'
   * environment beyond CDS_CONFIG; `configOf(slot)`: their CDS_CONFIG object; `grace`: their shutdownGrace in ms;
   * `history` records every incarnation.
   */
  constructor({ app = 'app', dir, env, configOf, grace, history }) {
    super()
    this.setMaxListeners(0) // every waiting request listens for a change
    Object.assign(this, { app, dir, env, configOf, grace, history })
    this.current = new Map()
    this.crashes = new Map()
    this.count = 0
    fleets.add(this)
    fs.mkdirSync(path.join(dir, 'logs'), { recursive: true })
  }

  /** Resolves when a process starts serving or ends, or after `ms` (callers check their condition again). */
  changed(ms = 500) {
    return new Promise(resolve => {
      const done = () => (clearTimeout(timer), this.off('change', done), resolve())
      const timer = setTimeout(done, ms)
      this.once('change', done)
    })
  }

  /** The processes serving now (a paused one serves nothing: a load balancer's health check takes it out). */
  live() {
    return [...this.current.values()].filter(p => p.url && p.exitCode === null && !p.ending && !p.paused)
  }

  /** `cds deploy` of the app to the seed's database, in a process of its own (test/chaos/deploy.js). */
  deploy() {
    const child = fork(DEPLOY, [], { env: { ...process.env, CHAOS_APP: this.app, CDS_CONFIG: JSON.stringify(this.configOf()) }, silent: true })
    let output = ''
    child.stdout.on('data', chunk => (output += chunk))
    child.stderr.on('data', chunk => (output += chunk))
    return new Promise((resolve, reject) => child.once('exit', code => (code === 0 ? resolve() : reject(new Error(`cds deploy failed (${code}):\n${output}`)))))
  }

  async start(slot, { skew = 0 } = {}) {
    if (this.closed) throw new Error(`process ${slot} not started: the seed is over`)
    const config = this.configOf(slot)
    const env = { ...process.env, ...this.env, CHAOS_APP: this.app, CDS_CONFIG: JSON.stringify(config), CHAOS_INSTANCE: slot, CHAOS_SKEW_MS: String(skew) }
    const child = fork(SCRIPT, [], { env, silent: true, execArgv: [`--max-old-space-size=${MAX_OLD_SPACE_MB}`, '--require', PRELOAD] })
    const record = {
      app: this.app, slot, pid: child.pid, skew, maxAttempts: config.requires.queue.maxAttempts, startedAt: now(),
      log: path.join(this.dir, 'logs', `${String(++this.count).padStart(2, '0')}-${slot}-${child.pid}.log`)
    }
    this.history.processes.push(record)
    Object.assign(child, { record, ending: undefined, url: undefined })
    this.current.set(slot, child)
    const out = fs.openSync(record.log, 'a')
    // each line gets the true time it arrived, in seconds of the fault phase, to line it up with the history
    const stamp = () => (this.history.phase.start ? `${((now() - this.history.phase.start) / 1000).toFixed(3)}` : 'setup')
    const writer = () => {
      let partial = ''
      return chunk => {
        const lines = (partial + chunk).split('\n')
        partial = lines.pop()
        if (lines.length) fs.writeSync(out, lines.map(line => `[${stamp()}] ${line}\n`).join(''))
      }
    }
    child.stdout.on('data', writer())
    child.stderr.on('data', writer())
    child.once('exit', (code, signal) => {
      Object.assign(record, { endedAt: now(), code, signal, end: child.ending ?? 'crashed' })
      fs.closeSync(out)
      if (this.current.get(slot) === child) this.current.delete(slot)
      if (!child.ending && !this.closed) this.restartAfterCrash(slot, record)
      this.emit('change')
    })
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`process ${slot} (${child.pid}) did not serve within ${START_TIMEOUT} ms; see ${record.log}`)), START_TIMEOUT)
      child.stdout.on('data', chunk => {
        const url = String(chunk).match(/listening on (http:\/\/\S+)/)?.[1]
        if (!url || child.url) return
        child.url = url.replace('localhost', '127.0.0.1')
        record.readyAt = now()
        clearTimeout(timer)
        this.emit('change')
        resolve()
      })
      child.once('exit', () => (clearTimeout(timer), resolve()))
    })
    return child.url ? child : undefined
  }

  restartAfterCrash(slot, record) {
    const crashes = (this.crashes.get(slot) ?? 0) + 1
    this.crashes.set(slot, crashes)
    if (crashes > RESTARTS_AFTER_CRASH) return
    this.restarting = this.start(slot, { skew: record.skew }).catch(e => this.history.note(`restart of ${slot} failed: ${e.message}`))
  }

  /** kill -9: the process dies at once, its claims stay behind. */
  async kill(slot) {
    const child = this.current.get(slot)
    if (!child || child.exitCode !== null) return undefined
    child.ending = 'killed'
    const exited = new Promise(resolve => child.once('exit', resolve))
    process.kill(child.pid, 'SIGKILL')
    await exited
    return child.record
  }

  /**
   * SIGSTOP: the process stops where it is, its sockets and claims stay (a VM paused, a long GC, a container frozen);
   * `resume` continues it (SIGCONT). Returns the process's record.
   */
  pause(slot) {
    const child = this.current.get(slot)
    if (!child || child.exitCode !== null || child.ending || child.paused) return undefined
    process.kill(child.pid, 'SIGSTOP')
    child.paused = true
    this.emit('change')
    return child.record
  }

  resume(child) {
    if (!child.paused) return
    child.paused = false
    if (child.exitCode === null && child.signalCode === null) process.kill(child.pid, 'SIGCONT')
    this.emit('change')
  }

  /** SIGTERM, as a platform stops an instance: CAP's graceful shutdown. Records how long it took (I9). */
  async terminate(slot) {
    const child = this.current.get(slot)
    if (!child || child.exitCode !== null) return undefined
    this.resume(child)
    child.ending = 'terminated'
    const exited = new Promise(resolve => child.once('exit', resolve))
    const sent = now()
    process.kill(child.pid, 'SIGTERM')
    const limit = this.grace + TERM_SLACK
    const timer = setTimeout(() => {
      child.record.termOverdue = true
      process.kill(child.pid, 'SIGKILL')
    }, limit)
    await exited
    clearTimeout(timer)
    Object.assign(child.record, { termMs: now() - sent, termLimit: limit })
    return child.record
  }

  /** Stops every process: gracefully (timed), then nothing restarts them. */
  async stopAll() {
    this.closed = true
    await this.restarting
    await Promise.all([...this.current.keys()].map(slot => this.terminate(slot)))
  }

  /** Last resort when the checker itself fails: every process still running is killed by its PID. */
  killAll() {
    this.closed = true
    fleets.delete(this)
    for (const child of this.current.values()) if (child.exitCode === null) process.kill(child.pid, 'SIGKILL')
  }
}

function killEverything() {
  for (const fleet of fleets) fleet.killAll()
}

module.exports = { Fleet, killEverything, MAX_OLD_SPACE_MB }
