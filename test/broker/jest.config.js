/**
 * The broker suite (`npm run test:broker`): CAP apps and a real Redis server (Debian's redis-server, started by the
 * tests on 127.0.0.1) — the `redis-streams` kind, CAP's `redis-messaging` with the plugin, and the end-to-end faults
 * (a Redis outage, the producer or the consumer killed). Separate from `npm test` because it needs redis-server and
 * runs for minutes. The producer's database is the project's: SQLite or PostgreSQL, on the native store.
 */
const path = require('path')
const main = require('../../package.json').jest

const root = path.join(__dirname, '..', '..')

const broker = project => ({
  ...project,
  rootDir: root,
  testMatch: ['<rootDir>/test/broker/*.test.js'],
  testPathIgnorePatterns: project.testPathIgnorePatterns.filter(p => p !== '/test/broker/')
})

module.exports = {
  rootDir: root,
  testTimeout: 900000,
  maxWorkers: main.maxWorkers,
  projects: main.projects.filter(p => ['sqlite', 'postgres'].includes(p.displayName)).map(broker)
}
