/**
 * One process of the chaos app (test/chaos/app), as `cds serve` runs it: configured by CDS_CONFIG, ready when it
 * prints its URL, stopped by its PID (SIGTERM: CAP's graceful shutdown; SIGKILL: a crash).
 */
const path = require('path')

process.chdir(path.join(__dirname, 'app'))
const cds = require('@sap/cds')
cds.on('listening', ({ url }) => console.log(`chaos process ${process.pid} listening on ${url}`))
cds.exec('--port', '0')
