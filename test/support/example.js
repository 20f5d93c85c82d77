const { spawn } = require('child_process')
const fs = require('fs')
const net = require('net')
const os = require('os')
const path = require('path')
const axios = require('axios')
const { waitFor } = require('./wait')

/**
 * The example app (examples/travel) as its own process, the way `npm start` starts it (cds-serve in its folder), on a
 * free port of 127.0.0.1 and a fresh database: a new SQLite file, or `db` (a `cds.requires.db`, e.g. a database of
 * the run's PostgreSQL server). Stopped by its PID.
 */
const EXAMPLE = path.join(__dirname, '..', '..', 'examples', 'travel')
const CDS_SERVE = require.resolve('@sap/cds/bin/serve.js', { paths: [EXAMPLE] })

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address()
      server.close(() => resolve(port))
    })
    server.on('error', reject)
  })
}

/** The configuration the example runs with: `config` over its package.json, on `db` or a new SQLite file. */
function exampleConfig(config = {}, db) {
  const dbFile = () => path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'travel-')), 'db.sqlite')
  return { ...config, requires: { ...config.requires, db: db ?? { kind: 'sqlite', credentials: { url: dbFile() } } } }
}

/** Starts the example with `config` over its package.json; resolves once it answers HTTP. */
async function startExample(config = {}, db) {
  const port = await freePort()
  const cdsConfig = exampleConfig(config, db)
  const child = spawn(process.execPath, [CDS_SERVE], {
    cwd: EXAMPLE,
    env: { ...process.env, PORT: String(port), CDS_CONFIG: JSON.stringify(cdsConfig), NODE_ENV: 'development' },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let output = ''
  child.stdout.on('data', d => (output += d))
  child.stderr.on('data', d => (output += d))
  const http = axios.create({ baseURL: `http://127.0.0.1:${port}`, validateStatus: () => true })
  const exited = new Promise(resolve => child.once('exit', resolve))
  try {
    await waitFor(async () => child.exitCode === null && (await http.get('/').then(r => r.status === 200, () => false)), {
      timeout: 30000,
      what: 'the example app to listen'
    })
  } catch (e) {
    if (child.exitCode === null) process.kill(child.pid, 'SIGKILL')
    throw new Error(`${e.message}; its output:\n${output}`)
  }
  return {
    http,
    /** What the example runs with, for other processes on its database (the CLI). */
    config: cdsConfig,
    output: () => output,
    async stop() {
      if (child.exitCode === null) process.kill(child.pid, 'SIGTERM')
      await exited
    }
  }
}

module.exports = { EXAMPLE, startExample }
