/**
 * An instance of the test app's model WITHOUT the plugin (test/cap-app): CAP's built-in queue and runner, configured
 * by CDS_CONFIG (`cds.requires.queue.legacyLocking`, `timeout`), counting like the plugin's instances do
 * (test/support/counting.js). Ready when it prints its URL; stopped by its PID.
 */
const path = require('path')

process.chdir(path.join(__dirname, '..', 'cap-app'))
const cds = require('@sap/cds')
const { serveCounting } = require('./counting')

serveCounting(process.env.INSTANCE, { handlerMs: Number(process.env.COUNT_MS ?? 0) })
cds.on('listening', ({ url }) => console.log(`instance ${process.env.INSTANCE} listening on ${url}`))

cds.exec('--port', '0')
