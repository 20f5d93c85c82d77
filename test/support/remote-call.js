const cds = require('@sap/cds')

/**
 * A handler of `event` on `srv` that reads in its transaction, then awaits a remote call, then writes a `kind` record:
 * the SQLite snapshot case of issue 22, defect 7. `read` resolves once a handler has read; `answer()` lets the remote
 * call return; `attempts` lists the attempt of every run.
 */
function readThenAwaitRemote(srv, event, kind) {
  const attempts = []
  let reading, answer
  const read = new Promise(resolve => (reading = resolve))
  const answered = new Promise(resolve => (answer = resolve))
  srv.on(event, async req => {
    attempts.push(req.queue.attempt)
    await SELECT.one.from('test.Records')
    reading()
    await answered
    await INSERT.into('test.Records').entries({ ID: cds.utils.uuid(), kind, message: req.queue.messageId })
  })
  return { attempts, read, answer }
}

module.exports = { readThenAwaitRemote }
