/**
 * One process of a chaos app (test/chaos/app, the producer, or test/chaos/consumer: CHAOS_APP), as `cds serve` runs
 * it: configured by CDS_CONFIG, ready when it prints its URL, stopped by its PID (SIGTERM: CAP's graceful shutdown;
 * SIGKILL: a crash).
 */
const path = require('path')

process.chdir(path.join(__dirname, process.env.CHAOS_APP ?? 'app'))
const cds = require('@sap/cds')
cds.on('listening', ({ url }) => console.log(`chaos process ${process.pid} listening on ${url}`))
cds.exec('--port', '0')
