const http = require('http')

/**
 * The remote system of the bench's remote-call scenario: a real HTTP server on 127.0.0.1 that answers every request
 * after `delay` ms, as a downstream API that takes that long. It runs in the bench's parent process, so the
 * measured process spends nothing on it. `inFlight.max` is the highest number of requests it held at once: what
 * the contender's concurrency really was.
 */
async function startRemote(delay) {
  const inFlight = { now: 0, max: 0, served: 0 }
  const server = http.createServer((req, res) => {
    inFlight.now++
    inFlight.max = Math.max(inFlight.max, inFlight.now)
    req.resume()
    setTimeout(() => {
      inFlight.now--
      inFlight.served++
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}')
    }, delay)
  })
  server.keepAliveTimeout = 60_000
  await new Promise((resolve, reject) => server.once('error', reject).listen(0, '127.0.0.1', resolve))
  const url = `http://127.0.0.1:${server.address().port}`
  const stop = () => new Promise(resolve => {
    server.closeAllConnections?.()
    server.close(() => resolve())
  })
  return { url, inFlight, stop }
}

/** `cds.requires.Remote` of the measured process: CAP's REST remote service on that server, no authentication. */
const remoteService = url => ({ kind: 'rest', credentials: { url, authentication: 'NoAuthentication' } })

module.exports = { startRemote, remoteService }
