const { MARGIN } = require('./facts')

/**
 * I4: per ordering key, messages run one at a time in `timestamp` order (enqueue order; a delayed message at its due
 * time): a message must not start while an earlier one of its key that had committed is not done — succeeded, or
 * (with 'continue') a dead letter. Under 'block' a dead head holds its key until an operator revives or deletes it;
 * retention is no operator.
 */

/** When the queue was done with message `m` at the earliest, as far as its key is concerned (Infinity: never). */
function release(f, m, ordering) {
  const runs = [...m.ids].flatMap(id => f.runs.get(id) ?? [])
  const effect = (f.effects.get(m.wid) ?? [])[0]
  const success = effect && runs.find(r => r.pid === effect.pid && r.attempt === effect.attempt && r.outcome === 'ok')
  if (ordering === 'block') {
    const deleted = f.history.operator.find(a => ['delete', 'deleteAll', 'purge'].includes(a.action) && f.succeeded(a) && [...m.ids].some(ID => f.covers(a, { ID, service: m.service, tenant: m.tenant })))
    return Math.min(success?.end ?? Infinity, deleted?.from ?? Infinity)
  }
  // 'continue': an attempt that may have made it a dead letter (which leaves the key) — its last by number, one that
  // threw unrecoverable, or one cut off by a kill (lost claims are charged too)
  const minMax = Math.min(...(m.service === 'Ledger' ? [f.settingsOf('Ledger').maxAttempts] : f.maxAttemptsSeen))
  const last = runs.find(r => r.outcome === 'unrecoverable' || r.attempt >= minMax || r.end === undefined)
  // a message charged by lost claims alone may have died without any run: nothing is known of when
  const charged = runs.length === 0 && !effect
  return charged ? 0 : Math.min(success?.end ?? Infinity, last?.start ?? Infinity)
}

/**
 * The last moment before `before` at which a sample of the table saw message `ID` waiting (not claimed): its claim
 * came later. -Infinity if no sample did.
 */
function waitingAt(f, ID, before) {
  let last = -Infinity
  for (const { at, claims } of f.history.claimSamples) {
    if (at >= before) break
    if (claims.some(c => c.ID === ID && c.status !== 'processing')) last = at
  }
  return last
}

/** When message `m` had committed at the latest: the app's answer, or the kill that cut the request off. */
function committedBy(f, request) {
  if (request.outcome === 'committed') return request.doneAt
  const died = f.diedAt(request.pid)
  return died ?? Infinity
}

function I4(f) {
  const violations = []
  const keys = new Map()
  for (const [wid, intent] of f.intents) {
    const { message, request } = f.asked.get(wid) ?? {}
    if (!message?.orderKey || intent.timestamp == null) continue
    const tenant = request.tenant
    const ids = f.messageIds(wid)
    const starts = [...ids].flatMap(id => f.runs.get(id) ?? []).map(r => r.start)
    const m = { wid, tenant, service: message.service, ids, timestamp: intent.timestamp, committed: committedBy(f, request), firstStart: Math.min(...starts) }
    const k = `${tenant} ${message.service} ${message.orderKey}`
    if (!keys.has(k)) keys.set(k, [])
    keys.get(k).push(m)
  }
  for (const [k, messages] of keys) {
    const service = messages[0].service
    const ordering = f.settingsOf(service).ordering
    messages.sort((a, b) => a.timestamp - b.timestamp)
    for (let i = 0; i < messages.length; i++) {
      const earlier = messages[i]
      const done = release(f, earlier, ordering)
      for (const later of messages.slice(i + 1)) {
        if (later.timestamp === earlier.timestamp || !(later.firstStart < Infinity)) continue
        // the later one must have been claimed after the earlier one committed: a sample saw it waiting after that
        const run = [...later.ids].flatMap(id => f.runs.get(id) ?? []).find(r => r.start === later.firstStart)
        const waiting = waitingAt(f, run.ID, later.firstStart)
        if (earlier.committed + MARGIN >= waiting) continue
        if (later.firstStart + MARGIN >= done) continue
        const state = done === Infinity ? (ordering === 'block' ? 'a dead head no operator had revived or deleted' : 'not done') : `done at ${f.time(done)}`
        violations.push({
          wid: later.wid, ids: [...earlier.ids, ...later.ids], pids: [run.pid],
          text: `key ${k.split(' ').slice(1).join(' ')} ('${ordering}'): ${later.wid} started at ${f.time(later.firstStart)} (process ${run.pid}; still waiting at ${f.time(waiting)}) before ${earlier.wid}, enqueued earlier (committed by ${f.time(earlier.committed)}), was ${state}`
        })
        break
      }
    }
  }
  return violations.map(v => ({ ...v, invariant: 'I4', title: "per key, messages run in enqueue order; under 'block' nothing passes a dead head until an operator acts" }))
}

module.exports = { I4 }
