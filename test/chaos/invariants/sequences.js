const { MARGIN } = require('./facts')

/**
 * I19: sequence numbers per ordering key, as docs/CONSUMER.md promises them since the claim that first takes a keyed
 * message numbers it (issue 31, R9): per key each committed message that was numbered has one number, the same on
 * every attempt, redelivery and copy; the numbers count from 1 without gaps and without a number twice (a rolled-back
 * enqueue uses none, nor does a message deleted before it ran); they follow the order in which the key's messages
 * first ran, and their enqueue order; a single consumer that never died or stood still applies them in that order.
 * The app cannot know a number when it enqueues, so the checker reads them where they are seen: the handlers'
 * `req.queue.sequence` (the remote log's starts), the consumer's CloudEvents `sequence` (its deliveries and `Applied`),
 * the entries at the broker and the rows' `sequence` column after settling.
 */

/** Each observation of a number, per message ID: `{ n, where }`. */
function observations(f) {
  const seen = new Map()
  const add = (ID, n, where) => {
    if (!ID || n === undefined || n === null) return
    if (!seen.has(ID)) seen.set(ID, [])
    seen.get(ID).push({ n: Number(n), where })
  }
  for (const [ID, runs] of f.runs) for (const r of runs) add(ID, r.sequence, `attempt ${r.attempt} in process ${r.pid} at ${f.time(r.start)}`)
  // 0: written keyed, no claim has numbered it yet (lib/store/sequences.ts); null: a row without a number (CAP's own)
  for (const row of f.final.rows) if (row.sequence > 0) add(row.ID, row.sequence, 'its row after settling')
  const consumer = f.final.consumer
  if (consumer) {
    for (const a of f.log.apply ?? []) add(a.eventID, a.sequence, `the consumer's delivery at ${f.time(a.at)}`)
    const idOf = new Map([...f.eventIntents.values()].map(i => [i.wid, i.messageID]))
    for (const [stream, entries] of Object.entries(consumer.broker ?? {})) for (const e of entries) add(idOf.get(e.wid), e.sequence, `entry ${e.id} of ${stream}`)
  }
  return seen
}

/** The committed keyed messages the plugin wrote (CAP-format rows of the import get no number), per tenant and key. */
function keyedMessages(f, seen) {
  const keys = new Map()
  const inTable = new Set(f.final.rows.map(r => r.ID))
  for (const intent of f.final.intents) {
    if (!intent.orderingKey) continue
    const message = (f.asked.get(intent.wid) ?? f.events.get(intent.wid))?.message
    if (!message || message.foreign) continue
    const ids = intent.service === 'broker' ? new Set([intent.messageID].filter(Boolean)) : f.messageIds(intent.wid)
    const numbers = [...ids].flatMap(ID => seen.get(ID) ?? [])
    const runs = [...ids].flatMap(ID => f.runs.get(ID) ?? []).sort((a, b) => a.start - b.start)
    const k = `${intent.tenant ?? ''} ${intent.orderingKey}`
    if (!keys.has(k)) keys.set(k, [])
    keys.get(k).push({ ...intent, message, ids, numbers, firstRun: runs[0], gone: ![...ids].some(ID => inTable.has(ID)) })
  }
  return keys
}

/** The request that enqueued `m` (a remote call or an event). */
const requestOf = (f, m) => (f.asked.get(m.wid) ?? f.events.get(m.wid))?.request

/** When `m`'s enqueuing request had answered, so its transaction had committed (or ended) by then. */
const committedBy = (f, m) => requestOf(f, m)?.doneAt

/** When `m`'s enqueuing request was sent: its transaction committed after that, and a claim numbered it later still. */
const sentAt = (f, m) => requestOf(f, m)?.sentAt

const list = (items, n = 5) => `${items.slice(0, n).join(', ')}${items.length > n ? ', …' : ''}`

function I19(f) {
  const violations = []
  const seen = observations(f)
  for (const [k, messages] of keyedMessages(f, seen)) {
    const key = k.trim()
    // kept: one number per message, on every attempt, delivery and copy
    for (const m of messages) {
      const distinct = [...new Set(m.numbers.map(o => o.n))]
      if (distinct.length > 1) violations.push({ wid: m.wid, text: `key ${key}: ${m.wid} carried ${distinct.length} numbers: ${list(m.numbers.map(o => `${o.n} (${o.where})`), 8)}` })
      m.sequence = distinct.length === 1 ? distinct[0] : undefined
    }
    // a keyed message that ran carries its number at its handler
    const unnumbered = messages.filter(m => m.firstRun && m.firstRun.sequence === undefined)
    if (unnumbered.length) violations.push({ text: `key ${key}: ${unnumbered.length} messages ran without a sequence number in req.queue: ${list(unnumbered.map(m => `${m.wid} (${f.describeRun(m.firstRun)})`))}` })
    // from 1, each number once, no gap but where a message that may have had it is gone unseen (deleted after its
    // claim numbered it, before it ran; an event Redis lost)
    const numbered = messages.filter(m => m.sequence !== undefined)
    const byNumber = new Map()
    for (const m of numbered) byNumber.set(m.sequence, [...(byNumber.get(m.sequence) ?? []), m])
    for (const [n, ms] of byNumber) if (ms.length > 1) violations.push({ text: `key ${key}: number ${n} was given to ${ms.length} messages: ${list(ms.map(m => m.wid))}` })
    const max = Math.max(0, ...byNumber.keys())
    const gaps = Array.from({ length: max }, (_, i) => i + 1).filter(n => !byNumber.has(n))
    const unseen = messages.filter(m => m.sequence === undefined && m.numbers.length === 0 && m.gone)
    if (gaps.length > unseen.length) {
      violations.push({ text: `key ${key}: numbers ${list(gaps.map(String), 10)} of 1 to ${max} belong to no message (${numbered.length} numbered; ${unseen.length ? `only ${unseen.length} gone unseen that may have had one: ${list(unseen.map(m => m.wid))}` : 'none of the key is gone unseen'})` })
    }
    // in the order the key's messages first ran (a key's messages are claimed one at a time)
    const ran = numbered.filter(m => m.firstRun).sort((a, b) => a.sequence - b.sequence)
    for (let i = 1; i < ran.length; i++) {
      const [a, b] = [ran[i - 1], ran[i]]
      if (b.firstRun.start + MARGIN < a.firstRun.start) violations.push({ wid: b.wid, pids: [b.firstRun.pid], text: `key ${key}: ${b.wid} (number ${b.sequence}) first ran at ${f.time(b.firstRun.start)}, before ${a.wid} (number ${a.sequence}) first ran at ${f.time(a.firstRun.start)}` })
    }
    // and in enqueue order (the row's timestamp), where clocks agree and no delay moved the timestamp — among the
    // messages that had committed by then: one whose transaction was still open when a later one of its key was
    // claimed and numbered comes after it (seed 39: e83, stamped 10.045 s, committed by 10.949 s; e69, stamped
    // 10.252 s, committed at 10.667 s and reached the consumer with number 10 at 10.787 s; e83 got 11). Certain only
    // where the earlier one's request had answered before the later one's was sent: a first delivery is long after
    // the claim that numbered it (seed 119 in CI, 2026-12-08: e51's request answered at .314, e55, stamped after it
    // but committed by .214, was numbered in between and delivered after .314)
    const comparable = numbered.filter(m => m.timestamp !== null && !m.message.delay && !f.processOf(m.pid)?.skew).sort((a, b) => a.timestamp - b.timestamp)
    for (let i = 1; i < comparable.length; i++) {
      const [a, b] = [comparable[i - 1], comparable[i]]
      if (a.sequence > b.sequence && a.pid === b.pid && committedBy(f, a) < sentAt(f, b)) violations.push({ pids: [a.pid], text: `key ${key}: ${b.wid} was enqueued after ${a.wid} (timestamps ${a.timestamp} < ${b.timestamp}, process ${a.pid}) but got the lower number (${b.sequence} < ${a.sequence})` })
    }
  }
  const consumer = f.final.consumer
  if (consumer) {
    // a key's events in the order of their numbers, where the docs promise it: one consumer process that never stood still
    const oneConsumer = f.plan.consumer.slots.length === 1
    const reordering = f.history.consumerKills.length || f.history.pauses.some(p => p.app === 'consumer') || f.history.processes.some(p => p.app === 'consumer' && p.end === 'crashed')
    const revived = f.history.operator.some(a => a.action.startsWith('revive') && f.succeeded(a))
    for (const a of consumer.applied) {
      if (!a.orderKey || a.previous === null || a.previous < a.sequence) continue
      if (!oneConsumer || reordering || revived) continue
      violations.push({ wid: a.wid, pids: [a.pid], text: `key ${a.orderKey}: the consumer applied ${a.wid} (number ${a.sequence}) at ${f.time(a.at)}, after number ${a.previous} of its key: out of order, with one consumer process that neither died nor stood still` })
    }
  }
  return violations.map(v => ({ ...v, invariant: 'I19', title: "sequence numbers count each key from 1 without gaps, kept on retries, in the order the key's messages run and were enqueued, and reach a single consumer in that order" }))
}

module.exports = { I19 }
