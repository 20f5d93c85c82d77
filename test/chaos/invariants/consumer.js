const { MARGIN } = require('./facts')
const { isDead } = require('../settle')
const { CONSUMER_MAX_MESSAGE } = require('../consumer-plan')
const { ms } = require('../queues')

/**
 * The consumer half (issues 31 and 32): the producer's events on the broker and at the consumer app.
 * I16 a broker that is unavailable costs no attempt and makes no dead letter; I17 every committed event is at the
 * broker, nothing rolled back is, and an event is published more than once only where a fault cut its relay off;
 * I18 every committed event is applied once at the consumer (or is a dead letter its operators see), and no event
 * waits behind another; I20 a redelivery the consumer's inbox drops is one a fault explains, within what that fault
 * had in flight; I21 an @idempotent action books a key once and answers each repeat of it with the recorded
 * response. I19, the sequence numbers, is in sequences.js.
 */

/** How long after its first copy arrived a relay may still be in flight: its batch's transaction commits after it. */
const RELAY_IN_FLIGHT = 10_000

/**
 * What a relay attempt fails with while the broker is unavailable: the link's own error (it names the service and
 * Redis), Redis refusing the credentials, the client's connection errors.
 */
const UNAVAILABLE = /Redis|BROKER_UNAVAILABLE|NOAUTH|WRONGPASS|ClientClosed|client is closed|SocketClosed|Socket closed|ConnectionTimeout|ECONNREFUSED|ECONNRESET/i

/** Per workload id, what the broker holds of the seed's events (each stream's entries). */
function brokerCopies(f) {
  const copies = new Map()
  for (const entries of Object.values(f.final.consumer?.broker ?? {})) for (const e of entries) if (e.wid) copies.set(e.wid, (copies.get(e.wid) ?? 0) + 1)
  return copies
}

const appliedByWid = f => new Map((f.final.consumer?.applied ?? []).map(a => [a.wid, a]))

/** When an event had committed at the latest (the app's answer, or the kill that cut its request off). */
function committedAt(f, request) {
  if (request.outcome === 'committed') return request.doneAt
  return f.diedAt(request.pid) ?? request.doneAt ?? request.sentAt
}

/** A kill of Redis without its append-only file after `at`: an event relayed before it may be gone with it. */
const lostWithBroker = (f, at) => f.history.brokerFaults.find(b => b.kind === 'kill' && !b.persistence && b.from >= at - MARGIN)

/** The committed events the broker does not have, and may have lost (Redis killed without its file since their commit). */
function lostEvents(f, copies) {
  const lost = new Set()
  for (const [wid, { request }] of f.events) if (f.eventIntents.has(wid) && !copies.get(wid) && lostWithBroker(f, committedAt(f, request))) lost.add(wid)
  return lost
}

/**
 * Faults after which a relay may publish an event again (its XADD reached Redis, and then its process died, its
 * lease ran out, or the reply was lost): a producer process killed, crashed, stopped, paused or stalled, PostgreSQL
 * away, any fault of the broker. Returns its description, or undefined.
 */
function republishFault(f, from, to) {
  const overlaps = (a, b = Infinity) => a <= to + MARGIN && b >= from - MARGIN
  const producer = f.history.processes.filter(p => p.app !== 'consumer')
  const ended = producer.find(p => p.endedAt !== undefined && overlaps(p.endedAt, p.endedAt))
  if (ended) return `producer process ${ended.pid} ${ended.end} at ${f.time(ended.endedAt)}`
  const paused = f.history.pauses.find(p => p.app === 'app' && overlaps(p.from, p.to))
  if (paused) return `producer process ${paused.pid} paused from ${f.time(paused.from)} to ${f.time(paused.to)}`
  const broker = f.history.brokerFaults.find(b => overlaps(b.from, b.to))
  if (broker) return `the broker's ${broker.kind} from ${f.time(broker.from)} to ${f.time(broker.to)}`
  const outage = f.history.outages.find(o => overlaps(o.from, o.to))
  if (outage) return `PostgreSQL was restarted from ${f.time(outage.from)} to ${f.time(outage.to)}`
  const stall = producer.flatMap(p => f.stalls.get(p.pid) ?? []).find(s => overlaps(s.from, s.at))
  if (stall) return `process ${stall.pid} stalled for ${stall.ms} ms at ${f.time(stall.at)}`
  return undefined
}

function I16(f) {
  if (!f.final.consumer) return []
  const violations = []
  const charged = new Map()
  for (const sample of f.history.claimSamples) {
    for (const row of sample.charged ?? []) if (row.lastError && UNAVAILABLE.test(row.lastError)) charged.set(row.ID, { ...row, at: sample.at, first: charged.get(row.ID)?.first ?? sample.at })
  }
  const byError = new Map()
  for (const row of charged.values()) {
    const error = row.lastError.replace(/\s+/g, ' ').slice(0, 160)
    byError.set(error, [...(byError.get(error) ?? []), row])
  }
  for (const [error, rows] of byError) {
    const faults = f.history.brokerFaults.map(b => `${b.kind} ${f.time(b.from)}–${f.time(b.to)}`).join(', ') || 'none'
    violations.push({ ids: rows.map(r => r.ID), text: `${rows.length} events of the relay were charged attempts (up to ${Math.max(...rows.map(r => r.attempts))}, first seen at ${f.time(Math.min(...rows.map(r => r.first)))}) for the broker's unavailability: "${error}" (${rows.slice(0, 5).map(r => r.wid).join(', ')}${rows.length > 5 ? ', …' : ''}; broker faults: ${faults})` })
  }
  const dead = f.final.rows.filter(r => r.target === 'broker' && isDead(r, f.settings))
  if (dead.length) violations.push({ ids: dead.map(r => r.ID), text: `${dead.length} events are dead letters of the relay after settling (${dead.slice(0, 5).map(r => `${r.wid}: ${r.attempts} attempts`).join(', ')})` })
  return violations.map(v => ({ ...v, invariant: 'I16', title: "the broker's unavailability costs no attempt and makes no dead letter" }))
}

function I17(f) {
  if (!f.final.consumer) return []
  const violations = []
  const copies = brokerCopies(f)
  const twice = f.plan.consumer.deliverTwice
  const applied = appliedByWid(f)
  const lost = lostEvents(f, copies)
  const waiting = []
  for (const [wid, { request }] of f.events) {
    const n = copies.get(wid) ?? 0
    if (!f.eventIntents.has(wid)) {
      if (n) violations.push({ wid, text: `${wid}: its transaction did not commit (${request.outcome}), yet the broker has it ${n} times` })
      continue
    }
    const at = committedAt(f, request)
    if (n === 0) {
      const row = f.final.rows.find(r => r.wid === wid && r.target === 'broker')
      if (row && !isDead(row, f.settings)) waiting.push({ wid, row, at })
      else if (!row && !lost.has(wid)) violations.push({ wid, text: `${wid} (${f.events.get(wid).message.topic}) was committed at ${f.time(at)} and is not at the broker, nor waiting in the relay, and Redis lost nothing (its append-only file ${f.plan.consumer.persistence ? 'on' : 'off'}, no kill since)` })
      continue
    }
    const expected = twice ? 2 : 1
    if (n <= expected) continue
    // its relay was in flight from its commit until the batch it was published in committed, some time after its
    // first copy reached the consumer
    const until = (applied.get(wid)?.at ?? f.history.phase.end) + RELAY_IN_FLIGHT
    const fault = republishFault(f, at, until)
    if (!fault) violations.push({ wid, text: `${wid} (${f.events.get(wid).message.topic}) is at the broker ${n} times (published ${n - 1} times more than ${twice ? "the test mode's second delivery" : 'once'}), with no fault between its commit at ${f.time(at)} and ${f.time(until)} to cut its relay off` })
  }
  // still in the relay once settling ended: the broker was there all along by then
  if (waiting.length) {
    const first = waiting.reduce((a, b) => (a.at < b.at ? a : b))
    violations.push({ ids: waiting.map(w => w.row.ID), text: `${waiting.length} committed events were never relayed, still waiting in the relay after settling${f.final.drained?.drained ? '' : ' (which gave up)'} (the first committed at ${f.time(first.at)}): ${waiting.slice(0, 6).map(w => `${w.wid} (attempts ${w.row.attempts}, status ${w.row.status ?? 'null'})`).join(', ')}${waiting.length > 6 ? ', …' : ''}` })
  }
  return violations.map(v => ({ ...v, invariant: 'I17', title: 'every committed event is at the broker, none rolled back, and more than once only where a fault cut its relay off' }))
}

/** The events the consumer's inbox refuses by design: larger than its `maxMessageSize`. */
const refused = message => (message.size ?? 0) > CONSUMER_MAX_MESSAGE

/** Excuses for a second run of the subscriber for one event: its inbox row's lease lost by a consumer that stood still. */
function consumerStoodStill(f, from, to) {
  const overlaps = (a, b = Infinity) => a <= to + MARGIN && b >= from - MARGIN
  const paused = f.history.pauses.find(p => p.app === 'consumer' && overlaps(p.from, p.to))
  if (paused) return `consumer process ${paused.pid} paused`
  const killed = f.history.consumerKills.find(k => overlaps(k.at, k.at))
  if (killed) return `consumer process ${killed.pid} killed`
  const outage = f.history.outages.find(o => overlaps(o.from, o.to))
  if (outage) return 'PostgreSQL restarted'
  const stall = [...f.consumerPids].flatMap(pid => f.stalls.get(pid) ?? []).find(s => overlaps(s.from, s.at))
  return stall && `consumer process ${stall.pid} stalled`
}

function I18(f) {
  const consumer = f.final.consumer
  if (!consumer) return []
  const violations = []
  const applied = appliedByWid(f)
  const copies = brokerCopies(f)
  const lost = lostEvents(f, copies)
  const missing = { refused: [], other: [] }
  for (const [wid, { message, request }] of f.events) {
    const committed = f.eventIntents.has(wid)
    if (!committed) {
      if (applied.has(wid)) violations.push({ wid, text: `${wid}: its transaction did not commit (${request.outcome}), yet the consumer applied it at ${f.time(applied.get(wid).at)}` })
      continue
    }
    if (applied.has(wid) || lost.has(wid)) continue
    if (f.final.rows.some(r => r.wid === wid && r.target === 'broker')) continue // never relayed: I16's (a dead letter) or I1's to say
    missing[refused(message) ? 'refused' : 'other'].push({ wid, message, request, atBroker: copies.get(wid) ?? 0 })
  }
  const deadAtConsumer = consumer.visible?.length ?? 0
  if (missing.refused.length > deadAtConsumer) {
    violations.push({ text: `${missing.refused.length} committed events larger than the consumer's maxMessageSize (${CONSUMER_MAX_MESSAGE} bytes) were never applied, and its operators see ${deadAtConsumer} dead letters: ${missing.refused.map(m => `${m.wid} (${m.message.size} bytes, committed at ${f.time(committedAt(f, m.request))})`).join(', ')}` })
  }
  if (missing.other.length) {
    const first = Math.min(...missing.other.map(m => committedAt(f, m.request)))
    const topics = [...new Set(missing.other.map(m => m.message.topic))]
    const behind = missing.refused.length ? `; behind ${missing.refused.length} refused: ${missing.refused.map(m => `${m.wid} (${m.message.size} bytes, committed at ${f.time(committedAt(f, m.request))})`).join(', ')}` : ''
    const left = consumer.backlog && !consumer.backlog.error ? `; left in Redis: ${Object.entries(consumer.backlog).map(([s, b]) => `${s} ${b.pending} pending, lag ${b.lag}`).join(', ')}` : ''
    violations.push({
      text: `${missing.other.length} committed events at the broker were never applied by the consumer (topics ${topics.join(', ')}; the first committed at ${f.time(first)}${consumer.drained?.drained === false ? ', and the consumer stopped making progress' : ''}): ${missing.other.slice(0, 8).map(m => `${m.wid} (${m.message.topic}${m.message.orderKey ? ` ${m.message.orderKey}` : ''}, ${m.atBroker} at the broker)`).join(', ')}${missing.other.length > 8 ? ', …' : ''}${behind}${left}`
    })
  }
  // the subscriber ran again for an event it had applied: the inbox let a copy through
  const applies = (f.log.apply ?? []).filter(a => a.outcome === 'seen')
  for (const a of applies) {
    const first = applied.get(a.wid)
    const excuse = first && consumerStoodStill(f, first.at - 10_000, a.at)
    if (!excuse) violations.push({ wid: a.wid, pids: [a.pid], text: `${a.wid}: the consumer's subscriber got the event a second time at ${f.time(a.at)} (process ${a.pid}), after it was applied at ${f.time(first?.at)}: the inbox let a copy through` })
  }
  return violations.map(v => ({ ...v, invariant: 'I18', title: 'every committed event is applied once at the consumer, or is a dead letter its operators see; none waits behind another' }))
}

/**
 * Faults that may make the broker deliver an entry the consumer has handled again, each with how many such entries
 * it can have had in flight: a consumer process's entry in hand (one per stream) when it was killed or Redis lost
 * the acknowledgement, and everything it had read when it stood still longer than `claimAfter` (paused, stalled).
 * The window is on the first copy's receipt (`recordedAt`): received just before the fault or while it lasted.
 */
function redeliveryFaults(f) {
  const streams = 3
  const consumers = f.plan.consumer.slots.length
  const claimAfter = ms(f.plan.consumer.claimAfter)
  const everything = 100 * streams
  const faults = []
  for (const k of f.history.consumerKills) faults.push({ what: `consumer process ${k.pid} killed at ${f.time(k.at)}`, from: k.at - 2000, to: k.at + 1000, allowance: streams })
  for (const p of f.history.processes.filter(p => p.app === 'consumer' && p.end === 'crashed')) faults.push({ what: `consumer process ${p.pid} crashed`, from: p.endedAt - 2000, to: p.endedAt + 1000, allowance: streams })
  for (const p of f.history.pauses.filter(p => p.app === 'consumer')) faults.push({ what: `consumer process ${p.pid} paused from ${f.time(p.from)} to ${f.time(p.to)}`, from: p.from - 2000, to: p.to + 2000, allowance: everything })
  for (const pid of f.consumerPids) {
    for (const s of f.stalls.get(pid) ?? []) faults.push({ what: `consumer process ${pid} stalled ${s.ms} ms at ${f.time(s.at)}`, from: s.from - 2000, to: s.at + 2000, allowance: s.ms >= claimAfter ? everything : streams })
  }
  for (const b of f.history.brokerFaults) faults.push({ what: `the broker's ${b.kind} from ${f.time(b.from)} to ${f.time(b.to)}`, from: b.from - 2000, to: b.to + 5000, allowance: streams * consumers })
  for (const o of f.history.outages) faults.push({ what: `PostgreSQL restarted from ${f.time(o.from)} to ${f.time(o.to)}`, from: o.from - 2000, to: o.to + 2000, allowance: streams * consumers })
  return faults
}

/**
 * The event ID in an inbox receipt's key: `{"source":…,"id":…}` (CloudEvents; `topic` for other IDs) since the inbox
 * deduplicates by what makes an event unique (issue 31, defect 7), the bare ID before.
 */
function eventIdOf(receiptId) {
  if (!receiptId.startsWith('{')) return receiptId
  try {
    return String(JSON.parse(receiptId).id)
  } catch {
    return receiptId
  }
}

function I20(f) {
  const consumer = f.final.consumer
  if (!consumer) return []
  const widOf = new Map([...consumer.applied.map(a => [a.eventID, a.wid]), ...[...f.eventIntents.values()].filter(i => i.messageID).map(i => [i.messageID, i.wid])])
  const copies = brokerCopies(f)
  const twice = f.plan.consumer.deliverTwice ? 1 : 0
  const faults = redeliveryFaults(f).map(x => ({ ...x, used: 0 }))
  const unexplained = []
  for (const r of consumer.receipts.filter(r => r.scope.endsWith('inbox:messaging') && r.duplicates > 0)) {
    const wid = widOf.get(eventIdOf(r.ID))
    // the test mode's copy, and copies the producer published again (I17 judges those)
    let extra = r.duplicates - twice - Math.max(0, (copies.get(wid) ?? 1) - 1)
    const at = Date.parse(/Z$|[+-]\d\d:?\d\d$/.test(r.recordedAt) ? r.recordedAt : `${r.recordedAt.replace(' ', 'T')}Z`)
    for (const fault of faults) {
      if (extra <= 0) break
      if (at < fault.from || at > fault.to || fault.used >= fault.allowance) continue
      const take = Math.min(extra, fault.allowance - fault.used)
      fault.used += take
      extra -= take
    }
    if (extra > 0) unexplained.push({ wid, ID: r.ID, at, extra })
  }
  if (!unexplained.length) return []
  const alive = f.history.processes.filter(p => p.app === 'consumer').map(p => p.pid).join(', ')
  return [{
    invariant: 'I20', title: 'a redelivery the inbox drops is one a fault explains, within what the fault had in flight',
    text: `the consumer's inbox dropped ${unexplained.reduce((n, u) => n + u.extra, 0)} redeliveries of ${unexplained.length} events that no fault explains (no consumer process died or stood still, the broker and the database were there; consumer processes ${alive}, claimAfter ${f.plan.consumer.claimAfter}): ${unexplained.slice(0, 8).map(u => `${u.wid ?? u.ID} (first received at ${f.time(u.at)})`).join(', ')}${unexplained.length > 8 ? ', …' : ''}`
  }]
}

function I21(f) {
  const consumer = f.final.consumer
  if (!consumer) return []
  const violations = []
  const byRef = new Map()
  for (const call of f.history.credits) byRef.set(call.ref, [...(byRef.get(call.ref) ?? []), call])
  for (const [ref, calls] of byRef) {
    const booked = consumer.credits.filter(c => c.ref === ref)
    const ok = calls.filter(c => c.status === 200 || c.status === 201)
    const answers = new Set(ok.map(c => c.body?.ID))
    if (booked.length > 1) violations.push({ text: `credit ${ref} (${calls[0].key}) was booked ${booked.length} times: ${calls.map(c => `${c.status} from process ${c.pid}`).join(', ')}` })
    if (ok.length && booked.length !== 1) violations.push({ text: `credit ${ref} was answered ${ok.length} times with success, yet booked ${booked.length} times` })
    if (answers.size > 1) violations.push({ text: `credit ${ref}: the same Idempotency-Key got different answers: ${[...answers].join(', ')}` })
    if (ok.length && booked.length === 1 && !answers.has(booked[0].ID)) violations.push({ text: `credit ${ref}: answered with ${[...answers][0]}, booked as ${booked[0].ID}` })
    for (const c of calls.filter(c => c.status === 422 || c.status === 400)) violations.push({ pids: [c.pid], text: `credit ${ref}: a repeat with the same key, payload and user was refused with ${c.status}: ${JSON.stringify(c.body).slice(0, 200)}` })
  }
  return violations.map(v => ({ ...v, invariant: 'I21', title: 'an @idempotent action books a key once and answers its repeats with the recorded response' }))
}

module.exports = { I16, I17, I18, I20, I21 }
