const { randomBytes } = require('crypto')
const { createClient } = require('redis')
const redisServer = require('../../scripts/redis-server')

/**
 * The broker of one seed: a real Redis (Debian's redis-server, scripts/redis-server.js) on 127.0.0.1 and a free port,
 * with a password as a platform's binding has one, and with or without its append-only file (fsynced at every write),
 * as the seed's plan says. The fault injector kills it (SIGKILL) and starts it again on the same port and directory,
 * freezes it (SIGSTOP: the sockets stay open and nothing answers, as in a network partition) and thaws it (SIGCONT),
 * and changes its password (every client disconnected) and back. The checker's reads after settling go through a
 * connection of its own. Every process is addressed by its PID.
 */

/** Every server not yet stopped: an interrupted checker kills them (`killRedisServers`). */
const running = new Set()

async function startRedis({ persistence }) {
  const password = randomBytes(9).toString('hex')
  const server = { ...(await redisServer.startServer({ persistence, password })), password, persistence, frozen: false }
  running.add(server)
  return server
}

function killRedisServers() {
  for (const server of running) {
    try {
      process.kill(server.pid, 'SIGKILL')
    } catch {
      // gone already
    }
  }
}

/** A connection of the checker's own, with the password Redis has now. */
async function connect(server, password = server.password) {
  const client = createClient({ url: `redis://default:${password}@${server.host}:${server.port}`, socket: { reconnectStrategy: false } })
  client.on('error', () => {}) // a failed command rejects; the client's own events are not the checker's concern
  await client.connect()
  return client
}

async function withClient(server, fn, password) {
  const client = await connect(server, password)
  try {
    return await fn(client)
  } finally {
    await client.disconnect().catch(() => client.destroy?.())
  }
}

/** kill -9: whatever it had not written to its append-only file (all of it, without one) is gone. */
async function kill(server) {
  await redisServer.haltServer(server, 'SIGKILL')
}

/** Starts a killed server again on the same port and directory (its append-only file, if any). */
async function restart(server) {
  await redisServer.restartServer(server)
}

function freeze(server) {
  process.kill(server.pid, 'SIGSTOP')
  server.frozen = true
}

function thaw(server) {
  if (!server.frozen) return
  process.kill(server.pid, 'SIGCONT')
  server.frozen = false
}

/**
 * Credentials rotated on the server before the apps have the new ones: every client is disconnected and reconnects
 * with a password that is wrong now. Returns the function that puts the apps' password back (the binding is fixed).
 */
async function rotatePassword(server) {
  const client = await connect(server)
  const wrong = randomBytes(9).toString('hex')
  await client.sendCommand(['CONFIG', 'SET', 'requirepass', wrong])
  await client.sendCommand(['CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes'])
  return async () => {
    try {
      await client.sendCommand(['CONFIG', 'SET', 'requirepass', server.password])
    } finally {
      await client.disconnect().catch(() => client.destroy?.())
    }
  }
}

/**
 * The entries of `stream`, each with its ID, its event's workload id, its sequence number (CloudEvents `sequence`, a
 * header after the data) and its size (payloads can be MBs).
 */
async function entries(server, stream) {
  return withClient(server, async client => {
    const found = []
    let start = '-'
    for (;;) {
      const batch = await client.sendCommand(['XRANGE', stream, start, '+', 'COUNT', '50'])
      for (const [id, fields] of batch) {
        const raw = fields[fields.indexOf('message') + 1] ?? ''
        // the message's data comes first, and its workload id first in the data
        const sequence = raw.slice(-1000).match(/"sequence":"(\d+)"/)?.[1]
        found.push({ id, wid: raw.slice(0, 300).match(/"wid":"([^"]+)"/)?.[1], sequence: sequence === undefined ? undefined : Number(sequence), bytes: raw.length })
      }
      if (batch.length < 50) return found
      start = `(${batch[batch.length - 1][0]}`
    }
  })
}

async function stopRedis(server) {
  if (!server) return
  thaw(server)
  await redisServer.stopServer(server)
  running.delete(server)
}

module.exports = { startRedis, stopRedis, killRedisServers, kill, restart, freeze, thaw, rotatePassword, entries, withClient }
