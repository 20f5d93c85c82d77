const { spawn, execFileSync } = require('child_process')
const fs = require('fs')
const net = require('net')
const os = require('os')
const path = require('path')
const { HOST, freePort, isRunning } = require('./local-servers')

/**
 * A real Redis server on 127.0.0.1 and a free port, from Debian's package `redis-server` (`apt-get install -y
 * redis-server`; `.ci/run` installs it where /usr/bin/redis-server is missing), for the broker suite. No persistence
 * unless asked for (`persistence: true`: an append-only file fsynced at every write, so what Redis acknowledged
 * survives a kill); `tls: true` adds a TLS port with a certificate for 127.0.0.1 made here with openssl. Processes
 * are stopped by their PID.
 */

const BINARY = process.env.REDIS_SERVER ?? '/usr/bin/redis-server'

/** One PING over a plain socket (RESP), so this module needs no client: resolves true when the server answers PONG or asks for a password. */
function answers(server) {
  return new Promise(resolve => {
    const socket = net.connect(server.port, HOST)
    let reply = ''
    const done = ok => {
      socket.destroy()
      resolve(ok)
    }
    socket.setTimeout(1000, () => done(false))
    socket.once('error', () => done(false))
    socket.on('data', chunk => {
      reply += chunk
      if (reply.includes('\r\n')) done(reply.startsWith('+PONG') || reply.includes('NOAUTH'))
    })
    socket.write('PING\r\n')
  })
}

/**
 * A self-signed certificate for 127.0.0.1 (its own CA: a client trusts it with NODE_EXTRA_CA_CERTS=`cert`) and its
 * key, in `dir`, by Debian's openssl.
 */
function makeCertificate(dir) {
  const cert = path.join(dir, 'redis-cert.pem')
  const key = path.join(dir, 'redis-key.pem')
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', `/CN=${HOST}`,
    '-addext', `subjectAltName=IP:${HOST}`, '-keyout', key, '-out', cert], { stdio: 'ignore' })
  return { cert, key }
}

/** Runs the server of `server` (its directory, port and options) until it answers; sets `server.pid`. */
async function launch(server) {
  if (!fs.existsSync(BINARY)) throw new Error(`${BINARY} not found: install Debian's package redis-server (apt-get install -y redis-server)`)
  const args = [
    '--bind', HOST, '--port', String(server.port), '--dir', server.dir, '--save', '',
    '--appendonly', server.persistence ? 'yes' : 'no', ...(server.persistence ? ['--appendfsync', 'always'] : []),
    ...(server.password ? ['--requirepass', server.password] : []),
    // TLS beside the plain port (which the tests' own clients use), without client certificates, as on SAP BTP
    ...(server.tls ? ['--tls-port', String(server.tlsPort), '--tls-cert-file', server.tls.cert, '--tls-key-file', server.tls.key,
      '--tls-ca-cert-file', server.tls.cert, '--tls-auth-clients', 'no'] : []),
    '--logfile', server.log
  ]
  const child = spawn(BINARY, args, { detached: true, stdio: 'ignore' })
  child.unref()
  server.pid = child.pid
  const end = Date.now() + 30000
  while (!(await answers(server))) {
    if (child.exitCode !== null || !isRunning(child.pid)) throw new Error(`redis-server exited (${child.exitCode}); see ${server.log}`)
    if (Date.now() > end) {
      await haltServer(server)
      throw new Error(`redis-server did not answer within 30 s; see ${server.log}`)
    }
    await new Promise(resolve => setTimeout(resolve, 50))
  }
}

/**
 * Starts a server in a new temporary directory, on `port` or a free one; `password`: clients must authenticate (as on
 * SAP BTP); `tls`: also on `tlsPort` with TLS, its certificate in `server.tls.cert`. Returns what clients (`url`) and
 * the other functions need.
 */
async function startServer({ persistence = false, password, port, tls = false } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'event-queues-redis-'))
  const server = { host: HOST, port: port ?? (await freePort()), dir, log: path.join(dir, 'redis.log'), persistence, password }
  if (tls) Object.assign(server, { tls: makeCertificate(dir), tlsPort: await freePort() })
  server.url = password ? `redis://default:${password}@${HOST}:${server.port}` : `redis://${HOST}:${server.port}`
  await launch(server)
  return server
}

/** Stops the server by its PID (`signal`: SIGTERM shuts down cleanly, SIGKILL is a crash); its directory stays. */
async function haltServer(server, signal = 'SIGTERM') {
  if (!server.pid || !isRunning(server.pid)) return
  process.kill(server.pid, signal)
  const end = Date.now() + 30000
  while (isRunning(server.pid) && Date.now() < end) await new Promise(resolve => setTimeout(resolve, 20))
  if (isRunning(server.pid)) process.kill(server.pid, 'SIGKILL')
}

/** Starts a halted server again on the same port with the same directory (its append-only file, if any). */
const restartServer = launch

/** Stops the server by its PID and deletes its directory. */
async function stopServer(server) {
  await haltServer(server)
  fs.rmSync(server.dir, { recursive: true, force: true })
}

module.exports = { startServer, haltServer, restartServer, stopServer }
