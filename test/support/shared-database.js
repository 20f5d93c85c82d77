const { newDatabaseFile, onPostgres } = require('./app')
const { createDatabase, newDatabaseName, withClient } = require('./postgres')

/**
 * A database that several app processes (instances.js) share, on the jest project's database: a new SQLite file, or
 * a new database of the run's PostgreSQL server (by name, as instances.js takes it). Read beside the apps with `query`.
 */
async function sharedDatabase() {
  if (!onPostgres()) return { kind: 'sqlite', credentials: { url: newDatabaseFile() } }
  const name = newDatabaseName()
  await createDatabase(name)
  return name
}

/** better-sqlite3 on the cds 9 stack, node:sqlite on the cds 10 one (@cap-js/sqlite 3 brings no native driver). */
function openReadOnly(file) {
  try {
    return new (require('better-sqlite3'))(file, { readonly: true })
  } catch {
    return new (require('node:sqlite').DatabaseSync)(file, { readOnly: true })
  }
}

/** The rows of `sql` (plain SQL both databases take; quote aliases) in `database`, read beside the apps. */
async function query(database, sql) {
  if (typeof database === 'string') return (await withClient(client => client.query(sql), database)).rows
  const sqlite = openReadOnly(database.credentials.url)
  try {
    return sqlite.prepare(sql).all()
  } finally {
    sqlite.close()
  }
}

module.exports = { sharedDatabase, openReadOnly, query }
