/**
 * The fault suite (`npm run test:faults`): kill -9, database outage, poison messages, stuck handlers, shutdown, bad
 * input, secrets. Separate from `npm test` because it runs for minutes; same projects and naming as the main suite
 * (`*.sqlite.test.js` only on SQLite, `*.postgres.test.js` only on PostgreSQL, the others on both).
 */
const path = require('path')
const main = require('../../package.json').jest

const root = path.join(__dirname, '..', '..')

/**
 * The 600 MB backlogs of memory.test.js run on the native stores only: each of its tests writes and reads 600 MB for
 * a minute or more. The portable store's claim is bounded by the same rule, tested with small messages on every
 * project in test/runner/claim-size.test.js.
 */
const NATIVE_ONLY = ['/test/faults/memory\\.test\\.js$']

const faults = project => ({
  ...project,
  rootDir: root,
  testMatch: ['<rootDir>/test/faults/*.test.js'],
  testPathIgnorePatterns: project.testPathIgnorePatterns
    .filter(p => p !== '/test/faults/')
    .concat(project.displayName.endsWith('-portable') ? NATIVE_ONLY : [])
})

module.exports = {
  rootDir: root,
  testTimeout: 180000,
  maxWorkers: main.maxWorkers,
  reporters: main.reporters,
  projects: main.projects.map(faults)
}
