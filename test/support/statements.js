const { onPostgres } = require('./app')

/**
 * Counts the statements that reach the database driver, whoever sends them (CAP's pipeline or the plugin's own
 * statements on the transaction's connection): pg's `Client#query`, or the SQLite statement methods of
 * better-sqlite3 and node:sqlite, whichever @cap-js/sqlite loaded. `stop()` restores the drivers.
 */
function countStatements() {
  const counter = { count: 0, restore: [] }
  const wrap = (proto, names) => {
    for (const name of names) {
      const original = proto[name]
      proto[name] = function (...args) {
        counter.count++
        return original.apply(this, args)
      }
      counter.restore.push(() => (proto[name] = original))
    }
  }
  const paths = { paths: [require.resolve(onPostgres() ? '@cap-js/postgres' : '@cap-js/sqlite')] }
  if (onPostgres()) wrap(require(require.resolve('pg', paths)).Client.prototype, ['query'])
  else {
    try {
      const Database = require(require.resolve('better-sqlite3', paths))
      const probe = new Database(':memory:')
      wrap(Object.getPrototypeOf(probe.prepare('SELECT 1')), ['run', 'get', 'all', 'iterate'])
      probe.close()
    } catch {
      // not installed: @cap-js/sqlite 3 runs on node:sqlite
    }
    try {
      wrap(require('node:sqlite').StatementSync.prototype, ['run', 'get', 'all', 'iterate'])
    } catch {
      // Node without node:sqlite: better-sqlite3 is the driver
    }
  }
  return {
    get count() {
      return counter.count
    },
    stop: () => counter.restore.splice(0).forEach(restore => restore())
  }
}

module.exports = { countStatements }
