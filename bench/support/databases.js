const fs = require('fs')
const os = require('os')
const path = require('path')
const { createDatabase, dbConfig, newDatabaseName, withClient } = require('./postgres')

/** A fresh database per measurement: a SQLite file in a directory of its own, or a database on `server`. */

function sqliteDb() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'event-queues-bench-'))
  return { db: { kind: 'sqlite', credentials: { url: path.join(dir, 'bench.sqlite') } }, cleanup: () => fs.rmSync(dir, { recursive: true, force: true }) }
}

async function postgresDb(server) {
  const database = newDatabaseName()
  await createDatabase(database, server)
  const cleanup = () => withClient(c => c.query(`DROP DATABASE ${c.escapeIdentifier(database)} WITH (FORCE)`), 'postgres', server)
  return { db: dbConfig(database, server), database, cleanup }
}

/** `{ db, cleanup }` (and `database` on PostgreSQL) for `kind` 'sqlite' or 'postgres'. */
const newDatabase = (kind, server) => (kind === 'sqlite' ? sqliteDb() : postgresDb(server))

module.exports = { newDatabase }
