const cds = require('@sap/cds')
const { createHash } = require('crypto')
const { now } = require('./true-clock')
const { insert, insertAll } = require('./plain-sql')

const MESSAGES = 'cds.outbox.Messages'

/** CAP 9.9's ID of a task row: a version-4 UUID of SHA-256(`<queue>||<task>`) (@sap/cds/libx/queue). */
function capTaskId(queue, task) {
  const hash = createHash('sha256').update(`${queue}||${task}`).digest()
  hash[6] = (hash[6] & 0x0f) | 0x40
  hash[8] = (hash[8] & 0x3f) | 0x80
  const hex = hash.toString('hex')
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`
}

/**
 * The queue row a message of this transaction got, found by its service and its workload id, which is in the first
 * characters of `msg` (see `dataOf`): only they are searched. A LIKE over the whole of `msg` read every payload of the
 * service (seed 39: documents and Archive payloads of 0.6–3.5 MB, 360 MB in all) in each enqueuing transaction, which
 * then ran for 20–46 s on a saturated database and held the pools' connections. A keyed message has no sequence number
 * yet: the claim that first takes it gives it one (docs/CONSUMER.md), which the checker reads where handlers and the
 * consumer see it.
 */
function rowOf(service, wid) {
  return SELECT.one.from(MESSAGES).columns('ID', 'timestamp').where({ service }).and('substring(msg, 0, 300) like', `%"wid":"${wid}"%`)
}

/** The handler's instructions, with the workload id first, so it is found in the first characters of `msg`. */
function dataOf(m) {
  const data = { wid: m.wid }
  if (m.orderKey) data.orderKey = m.orderKey
  for (const field of ['fail', 'mode', 'ms']) if (m[field]) data[field] = m[field]
  if (m.size) data.pad = 'x'.repeat(m.size)
  return data
}

async function enqueue(m) {
  const srv = await cds.connect.to(m.service)
  const data = dataOf(m)
  // an event for the consumer app: published on the broker (queued by default, as every messaging service)
  if (m.topic) await srv.emit(m.topic, data)
  else if (m.delay) await srv.send({ event: 'work', data, queue: { after: m.delay } })
  else if (m.send) await srv.send('work', data)
  else await srv.emit('work', data)
  const at = now()
  const row = m.orderKey || m.heldAgo || (m.topic && !m.size) ? await rowOf(m.service, m.wid) : undefined
  if (m.heldAgo) {
    // As an operator script or CAP's own runner would: the row is held by a runner since `heldAgo` ms.
    await UPDATE(MESSAGES, row.ID).with({ status: 'processing', lastAttemptTimestamp: new Date(Date.now() - m.heldAgo).toISOString() })
  }
  await insert('chaos_Intents', { wid: m.wid, service: m.service, orderingKey: m.orderKey, messageID: row?.ID, timestamp: row?.timestamp, pid: process.pid, at })
}

/** A row as CAP's built-in queue writes it: CAP's columns only, `msg` in CAP's shape. */
function foreignRow(r, ms) {
  const data = { wid: r.wid }
  if (r.orderKey) data.orderKey = r.orderKey
  if (r.fail) data.fail = r.fail
  const msg = { service: r.service, event: 'work', data, headers: {}, context: cds.context.tenant ? { tenant: cds.context.tenant } : {} }
  return { ID: cds.utils.uuid(), timestamp: new Date(ms).toISOString(), target: r.service, msg: JSON.stringify(msg), attempts: 0 }
}

module.exports = class ChaosService extends cds.ApplicationService {
  init() {
    this.on('enqueue', async req => {
      for (const m of req.data.messages) await enqueue(m)
      if (req.data.rollback) req.reject(409, 'PLANNED_ROLLBACK')
    })
    this.on('scheduleTask', async req => {
      const { task, every, version, ms } = req.data
      const ticker = await cds.connect.to('Ticker')
      await ticker.schedule('tick', { task, version, ms }).every(every).as(task)
    })
    this.on('unscheduleTask', async req => (await cds.connect.to('Ticker')).unschedule(req.data.task))
    this.on('importRows', async req => {
      const start = Date.now()
      const rows = req.data.rows.map((r, i) => foreignRow(r, start + i))
      const at = now()
      const intents = rows.map((row, i) => ({ wid: req.data.rows[i].wid, service: row.target, orderingKey: req.data.rows[i].orderKey ?? null, messageID: row.ID, timestamp: row.timestamp, pid: process.pid, at }))
      for (let i = 0; i < rows.length; i += 100) {
        await insertAll('cds_outbox_Messages', rows.slice(i, i + 100))
        await insertAll('chaos_Intents', intents.slice(i, i + 100))
      }
    })
    this.on('importCapTask', async req => {
      const { task, every } = req.data
      const msg = { 'cds.internal.user': cds.context.user.id, service: 'Ticker', context: cds.context.tenant ? { tenant: cds.context.tenant } : {}, event: 'tick', data: { task, version: 0 }, queue: { task, every }, _fromSend: true }
      await insert('cds_outbox_Messages', { ID: capTaskId('queue', task), timestamp: new Date().toISOString(), target: 'queue', msg: JSON.stringify(msg), attempts: 0, task })
    })
    this.on('flush', () => cds.flush())
    return super.init()
  }
}
