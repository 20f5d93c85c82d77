/**
 * One instance of the multitenant test app (test/mt-app) in a Node process of its own, on the SQLite files of
 * CDS_CONFIG; ready when it prints its URL, stopped by its PID.
 */
const path = require('path')

process.chdir(path.join(__dirname, '..', 'mt-app'))
const cds = require('@sap/cds')
cds.on('listening', ({ url }) => console.log(`instance ${process.env.INSTANCE} listening on ${url}`))
cds.exec('--port', '0')
