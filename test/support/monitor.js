/**
 * The runner's event monitor (lib/runner/monitor.ts) of the app under test: `await monitor().next('outcome', e => ...)`
 * waits for what the runner did instead of sleeping.
 */
const monitor = () => require('../../lib/plugin').eventQueues().runner.monitor

module.exports = { monitor }
