const cds = require('@sap/cds')
const { record } = require('../../app/srv/remote-log')
const { now } = require('../../app/srv/true-clock')
const { insert } = require('../../app/srv/plain-sql')

/** The producer's topics (test/chaos/app: its messaging service `broker`). */
const TOPICS = ['chaos/orders', 'chaos/audit', 'chaos/documents']

/**
 * The subscriber, as docs/CONSUMER.md tells a consumer to write one: it runs from the inbox (`inboxed: true`), in the
 * transaction that deletes the inbox row, and is idempotent by the event's CloudEvents `id` (a duplicate delivery
 * applies nothing: the test mode `deliver: 'twice'` delivers every message twice). It keeps the last sequence number
 * per key: each applied event records the number before it, so a gap or a late event shows. Each delivery is logged
 * in the remote log (`apply`), outside the transaction.
 */
async function apply(msg) {
  const { wid, orderKey } = msg.data ?? {}
  const eventID = String(msg.headers?.id ?? '')
  const sequence = msg.headers?.sequence === undefined ? null : Number(msg.headers.sequence)
  const run = { wid, eventID, topic: msg.event, orderKey, sequence, ID: msg.queue?.messageId ?? cds.context?.id }
  if (await SELECT.one.from('consumer.Applied').columns('eventID').where({ eventID })) return record('apply', { ...run, outcome: 'seen' })
  let previous = null
  if (orderKey) {
    const last = await SELECT.one.from('consumer.Applied').columns('max(sequence) as max').where({ orderKey })
    previous = last?.max ?? null
  }
  await insert('consumer_Applied', { eventID, wid, topic: msg.event, orderKey, sequence, previous, pid: process.pid, at: now() })
  record('apply', { ...run, previous, outcome: 'applied' })
}

module.exports = class ConsumerService extends cds.ApplicationService {
  async init() {
    const messaging = await cds.connect.to('messaging')
    for (const topic of TOPICS) messaging.on(topic, apply)
    this.on('credit', async req => {
      const { ref, account, amount } = req.data
      const ID = cds.utils.uuid()
      await insert('consumer_Credits', { ID, ref, account, amount, pid: process.pid, at: now() })
      return { ID, account, amount }
    })
    this.on('flush', () => cds.flush())
    return super.init()
  }
}
