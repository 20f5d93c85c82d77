const net = require('net')

/** What the servers the tests and the bench start on this machine share: where they listen, and their processes. */

const HOST = '127.0.0.1'

/** A port on 127.0.0.1 that nothing listens on now. */
function freePort() {
  return new Promise((resolve, reject) => {
    const probe = net.createServer().once('error', reject)
    probe.listen(0, HOST, () => {
      const { port } = probe.address()
      probe.close(() => resolve(port))
    })
  })
}

function isRunning(pid) {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

module.exports = { HOST, freePort, isRunning }
