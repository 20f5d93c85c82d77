const cds = require('@sap/cds')
const { record } = require('./remote-log')
const { now } = require('./true-clock')
const { insert } = require('./plain-sql')

/** The longest a 'hang' waits for its signal; past it the handler gives up and says so (see the checker). */
const HANG_LIMIT = 90_000

/** Waits `ms`, or until `signal` aborts (then throws its reason). `ms` Infinity: until it aborts, or HANG_LIMIT. */
function pause(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason)
    const timer = setTimeout(() => (ms > HANG_LIMIT ? reject(new Error('hang-limit')) : resolve()), Math.min(ms, HANG_LIMIT))
    signal.addEventListener('abort', () => (clearTimeout(timer), reject(signal.reason)), { once: true })
  })
}


/**
 * A queued service standing for a remote system. `work` calls it: it logs the attempt's start and end in the remote
 * log, reads, waits as told (a remote call), writes its local effect, then fails as told: its first `fail` attempts
 * throw (with mode 'hang': hang until their signal aborts), or every attempt throws `unrecoverable`. `tick` is a
 * scheduled task. The handlers are idempotent as docs/TESTING.md asks (`deliver: 'twice'`): a message whose local
 * effect is there already (its message ID) changes nothing and ends `seen`.
 */
module.exports = class RemoteService extends cds.Service {
  init() {
    this.on('work', async req => {
      const { wid, fail = 0, mode = 'ok', ms = 0 } = req.data
      const { messageId: ID, attempt, signal, sequence } = req.queue
      const run = { wid, ID, attempt, service: this.name, tenant: cds.context.tenant, sequence }
      record('start', run)
      signal.addEventListener('abort', () => record('abort', { ...run, reason: signal.reason?.code }), { once: true })
      let outcome = 'error'
      try {
        await SELECT.one.from('chaos.Intents').columns('wid') // the handler's transaction reads first (a snapshot)
        if (await SELECT.one.from('chaos.Effects').columns('ID').where({ messageID: ID })) {
          outcome = 'seen'
          return { wid }
        }
        if (mode === 'hang' && attempt <= Math.max(fail, 1)) await pause(Infinity, signal)
        else if (ms) await pause(ms, signal)
        await insert('chaos_Effects', { ID: cds.utils.uuid(), wid, messageID: ID, attempt, pid: process.pid, at: now() })
        if (mode === 'unrecoverable') {
          outcome = 'unrecoverable'
          throw Object.assign(new Error(`planned unrecoverable failure of ${wid}`), { unrecoverable: true })
        }
        if (attempt <= fail && mode !== 'hang') {
          outcome = 'fail'
          throw new Error(`planned failure ${attempt} of ${fail} of ${wid}`)
        }
        outcome = 'ok'
        return { wid }
      } catch (e) {
        if (outcome === 'error') outcome = signal.aborted ? `aborted:${signal.reason?.code}` : e.message === 'hang-limit' ? 'hang-limit' : `error:${e.message}`
        throw e
      } finally {
        record('end', { ...run, outcome })
      }
    })
    // a callback is a queued message too: its attempts go to the remote log under `<wid>#<kind>`
    for (const kind of ['succeeded', 'failed']) {
      this.on(`work/#${kind}`, async req => {
        const run = { wid: `${req.data.wid}#${kind}`, ID: req.queue.messageId, attempt: req.queue.attempt, service: this.name, tenant: cds.context.tenant }
        record('start', run)
        let outcome = 'error'
        try {
          if (await SELECT.one.from('chaos.Callbacks').columns('ID').where({ wid: req.data.wid, kind })) {
            outcome = 'seen'
            return
          }
          await insert('chaos_Callbacks', { ID: cds.utils.uuid(), wid: req.data.wid, kind, pid: process.pid, at: now() })
          outcome = 'ok'
        } finally {
          record('end', { ...run, outcome })
        }
      })
    }
    this.on('tick', async req => {
      const { task, version, ms = 0 } = req.data
      const startedAt = now()
      const run = { task, version, ID: req.queue.messageId, attempt: req.queue.attempt, service: this.name, tenant: cds.context.tenant }
      record('tick-start', run)
      let outcome = 'error'
      try {
        if (ms) await pause(ms, req.queue.signal)
        await insert('chaos_Ticks', { ID: cds.utils.uuid(), task, version, messageID: req.queue.messageId, pid: process.pid, startedAt, at: now() })
        outcome = 'ok'
      } finally {
        record('tick-end', { ...run, outcome })
      }
    })
    return super.init()
  }
}
