/**
 * The browser suite (`npm run test:browser`): the ops page in a real headless Chromium (Debian's `chromium`
 * package at /usr/bin/chromium, or CHROMIUM_PATH). Separate from `npm test` so a machine without a browser still
 * runs the README's test command; .ci/run installs the package and runs this suite. SQLite only: the page only
 * talks to the operator service, whose queries the main suite runs on both databases.
 */
const path = require('path')

module.exports = {
  rootDir: path.join(__dirname, '..', '..'),
  testEnvironment: 'node',
  testMatch: ['<rootDir>/test/browser/*.test.js'],
  testTimeout: 60000,
  maxWorkers: 1,
  reporters: require('../../package.json').jest.reporters
}
