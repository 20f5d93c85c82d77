const fs = require('fs')
const { now } = require('./app/srv/true-clock')

/**
 * What happened in one seed, on the true clock: what the workload asked and what it was told, every process
 * incarnation and how it ended, every fault and operator action with the time window it ran in, samples of the
 * claims, and (after settling) the remote log, the app's own records and the queue table. The invariants read
 * only this.
 */
class History {
  constructor(plan) {
    this.plan = plan
    this.requests = []
    this.processes = []
    this.kills = []
    /** kill -9 of a consumer process: `{ pid, slot, at, held }` (held: the inbox rows it had claimed). */
    this.consumerKills = []
    /** SIGSTOP … SIGCONT of an app process: `{ app, slot, pid, from, to }`. */
    this.pauses = []
    this.outages = []
    /** Faults of the broker: `{ kind: 'kill' | 'freeze' | 'password', from, to, persistence }`. */
    this.brokerFaults = []
    /** Calls of the consumer's @idempotent action: `{ ref, key, pid, status, body, sentAt, doneAt, concurrent }`. */
    this.credits = []
    this.skews = []
    this.operator = []
    this.observations = []
    this.schedules = []
    this.unsubscribes = []
    this.claimSamples = []
    this.maxAttempts = []
    this.notes = []
    this.phase = {}
  }

  note(text) {
    this.notes.push(`${(now() - (this.phase.start ?? now())) | 0} ms: ${text}`)
  }
}

/** The remote log's records, by type, in the order written. */
function readRemoteLog(file) {
  const byType = { process: [], stall: [], heap: [], gc: [], start: [], abort: [], end: [], 'tick-start': [], 'tick-end': [], apply: [] }
  if (!fs.existsSync(file)) return byType
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    if (!line) continue
    const entry = JSON.parse(line)
    byType[entry.type]?.push(entry)
  }
  return byType
}

/**
 * Attempts as the remote system saw them: each `start` with its `end` and `abort` (same process, message and
 * attempt number), grouped by message ID, in start order.
 */
function runsOf(log, startType = 'start', endType = 'end') {
  const open = new Map()
  const runs = []
  const keyOf = e => `${e.pid} ${e.ID} ${e.attempt}`
  for (const e of log[startType]) {
    const run = { ...e, start: e.at, end: undefined, outcome: undefined, aborts: [] }
    runs.push(run)
    if (!open.has(keyOf(e))) open.set(keyOf(e), [])
    open.get(keyOf(e)).push(run)
  }
  // The same process may run the same attempt again (a message handed back and claimed anew): the first that has
  // not ended yet and started before the record is the one.
  const runAt = (e, done) => open.get(keyOf(e))?.find(run => !done(run) && run.start <= e.at)
  for (const e of log[endType]) {
    const run = runAt(e, r => r.end !== undefined)
    if (run) Object.assign(run, { end: e.at, outcome: e.outcome })
  }
  for (const e of log.abort ?? []) {
    const run = open.get(keyOf(e))?.findLast(r => r.start <= e.at)
    if (!run) continue
    run.aborts.push(e.reason)
    if (e.reason === 'HANDLER_TIMEOUT') run.timedOutAt ??= e.at
  }
  const byMessage = new Map()
  for (const run of runs.sort((a, b) => a.start - b.start)) {
    if (!byMessage.has(run.ID)) byMessage.set(run.ID, [])
    byMessage.get(run.ID).push(run)
  }
  return byMessage
}

module.exports = { History, readRemoteLog, runsOf }
