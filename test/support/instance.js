/**
 * One instance of the test app in a Node process of its own, as a scaled-out deployment runs it: the plugin, the
 * database from CDS_CONFIG (deployed first if TEST_APP_DEPLOY=yes) and a `record` handler that writes which instance ran which message.
 * Ready when it prints its URL; stopped with SIGTERM (cds serve shuts down gracefully).
 */
const path = require('path')

process.chdir(path.join(__dirname, '..', 'app'))
const cds = require('@sap/cds')

cds.on('served', async () => {
  const srv = await cds.connect.to('Target')
  srv.on('record', req =>
    INSERT.into('test.Records').entries({ ID: cds.utils.uuid(), kind: 'handled', message: req.queue.messageId, note: process.env.INSTANCE })
  )
})
cds.on('listening', ({ url }) => console.log(`instance ${process.env.INSTANCE} listening on ${url}`))

cds.exec('--port', '0')
