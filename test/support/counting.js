/**
 * What both instance scripts of the rolling-upgrade suite do, the plugin's (instance.js) and CAP's own
 * (cap-instance.js): a `count` handler that records which process handled which message (by `data.n`, which CAP's
 * runner also passes on), and POST /enqueue { from, count, event = 'count' } that queues `count` messages of `event`
 * (with `data.n`) in one transaction of this process: the plugin claims some of them at enqueue.
 */
const cds = require('@sap/cds')

/**
 * Writes a row of test.Records in the current transaction. With RECORDS_BY=cql (the database outage suites) as an app
 * writes it, CQL INSERT entries: on @cap-js/postgres that is a COPY of the entries, the path a session ended by a
 * restart crashed (issue 32). Otherwise plain SQL, which costs less there (no COPY, no temporary table per
 * transaction), for the suites that count thousands of records.
 */
function insertRecord(kind, message, note) {
  const ID = cds.utils.uuid()
  if (process.env.RECORDS_BY === 'cql') return INSERT.into('test.Records').entries({ ID, kind, message, note })
  const sql = 'INSERT INTO test_Records (ID, kind, message, note) VALUES (?, ?, ?, ?)'
  let n = 0
  const prepared = cds.db.kind === 'postgres' ? sql.replace(/\?/g, () => `$${++n}`) : sql
  return cds.db.run(prepared, [ID, kind, message, note])
}

function serveCounting(instance, { handlerMs = 0 } = {}) {
  cds.on('bootstrap', app => {
    app.post('/enqueue', require('express').json(), async (req, res) => {
      const { from, count, event = 'count' } = req.body
      const queued = cds.queued(await cds.connect.to('Target'))
      await cds.tx(async () => {
        for (let n = from; n < from + count; n++) await queued.emit(event, { n })
      })
      res.json({ queued: count })
    })
    // capire's "Task Processing": cds.queued(srv).flush() (CAP 9's cds.flush() without arguments flushes nothing)
    app.post('/flush', async (_, res) => {
      await cds.queued(await cds.connect.to('Target')).flush()
      res.json({ flushed: true })
    })
  })
  cds.on('served', async () => {
    const srv = await cds.connect.to('Target')
    srv.on('count', async req => {
      if (handlerMs) await new Promise(resolve => setTimeout(resolve, handlerMs))
      await insertRecord('counted', String(req.data.n), instance)
    })
  })
}

module.exports = { insertRecord, serveCounting }
