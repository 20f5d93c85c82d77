const cds = require('@sap/cds')

const MESSAGES = 'cds.outbox.Messages'

/** All rows of the queue table, oldest first. */
const messages = () => SELECT.from(MESSAGES).orderBy('timestamp')

/** Epoch ms of a timestamp column value, whatever form the database returns it in. */
function millis(value) {
  if (value == null) return null
  if (value instanceof Date) return value.getTime()
  return Date.parse(/[zZ]|[+-]\d\d:?\d\d$/.test(value) ? value : value.replace(' ', 'T') + 'Z')
}

/** A message row exactly as CAP's built-in queue writes it (no plugin columns: they take their defaults). */
function capRow({ event, data = {}, service = 'Target', user = 'cap-user', context = {}, headers = {}, target = 'queue' }) {
  const nanos = String(process.hrtime.bigint() % 1_000_000_000n).padStart(9, '0').substring(3, 7)
  return {
    ID: cds.utils.uuid(),
    timestamp: new Date().toISOString().replace('Z', `${nanos}Z`),
    target,
    msg: JSON.stringify({ 'cds.internal.user': user, service, context: { id: cds.utils.uuid(), ...context }, event, data, headers })
  }
}

/** Handlers record their invocations here; `count(event)` and `of(event)` read them back. */
function recorder() {
  const calls = []
  return {
    calls,
    record: (event, entry) => calls.push({ event, ...entry }),
    of: event => calls.filter(c => c.event === event),
    count: event => calls.filter(c => c.event === event).length
  }
}

module.exports = { MESSAGES, messages, millis, capRow, recorder }
