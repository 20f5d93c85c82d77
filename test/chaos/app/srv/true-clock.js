/**
 * The true time in epoch ms: `performance` is not moved when the checker skews a process's `Date`
 * (test/chaos/preload.js), so every process's records compare on one clock.
 */
const now = () => performance.timeOrigin + performance.now()

module.exports = { now }
