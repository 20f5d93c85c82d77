const { execFileSync } = require('child_process')
const server = require('../../../scripts/redis-server')

/**
 * A Redis server for one suite (scripts/redis-server.js): its port is chosen when the suite file loads, because an
 * app's configuration (CDS_CONFIG) is written before cds.test starts; the server itself starts in a beforeAll
 * registered ahead of cds.test's, and is stopped by its PID after the suite, also when it failed.
 */

/** A free port on 127.0.0.1, found synchronously (in a child process). */
function freePortNow() {
  const script = "const s = require('net').createServer().listen(0, '127.0.0.1', () => { console.log(s.address().port); s.close() })"
  return Number(execFileSync(process.execPath, ['-e', script], { encoding: 'utf8' }).trim())
}

/** Registers the suite's server; returns it at once with `host`, `port` and `url` (`password`: clients must authenticate). */
function suiteRedis({ persistence = false, password } = {}) {
  const redis = { port: freePortNow(), persistence, password }
  redis.url = password ? `redis://default:${password}@127.0.0.1:${redis.port}` : `redis://127.0.0.1:${redis.port}`
  beforeAll(async () => Object.assign(redis, await server.startServer({ persistence, password, port: redis.port })))
  afterAll(() => server.stopServer(redis))
  return redis
}

module.exports = { suiteRedis, ...server }

