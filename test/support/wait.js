/** Polls `probe` until it returns a truthy value (returned) or `timeout` ms pass (throws, with `what`). */
async function waitFor(probe, { timeout = 10000, interval = 20, what = 'condition' } = {}) {
  const end = Date.now() + timeout
  for (;;) {
    const value = await probe()
    if (value) return value
    if (Date.now() > end) throw new Error(`Timed out after ${timeout} ms waiting for ${what}`)
    await new Promise(resolve => setTimeout(resolve, interval))
  }
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

module.exports = { waitFor, sleep }
