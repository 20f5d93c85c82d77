const fs = require('fs')
const path = require('path')
const { Client } = require('pg')
const pgServer = require('../../scripts/postgres-server')

/**
 * The database of one seed, and the checker's own reads of it (beside the app, never through it): a SQLite file
 * (one per tenant in the multitenant variants) or a database on the run's private PostgreSQL server, which the fault
 * injector may restart. SQL is written for both: unquoted names fold to what CAP created, aliases keep their case.
 */

/** The run's PostgreSQL server, started when the first PostgreSQL seed needs it. */
let server

async function postgresServer() {
  server ??= await pgServer.startServer({ fsync: 'off' })
  return server
}

async function stopPostgres() {
  if (server) await pgServer.stopServer(server)
  server = undefined
}

/** better-sqlite3 on the cds 9 stack, node:sqlite on the cds 10 one. */
function openReadOnly(file) {
  try {
    return new (require('better-sqlite3'))(file, { readonly: true, fileMustExist: true })
  } catch (e) {
    if (e.code === 'SQLITE_CANTOPEN') throw e
    return new (require('node:sqlite').DatabaseSync)(file, { readOnly: true })
  }
}

/** `name`: the file of the app's database in the seed's folder (the producer's `db.sqlite`, the consumer's its own). */
function sqliteDatabase(dir, variant, name = 'db.sqlite') {
  const file = path.join(dir, name)
  const fileOf = tenant => (tenant ? file.replace(/\.sqlite$/, `-${tenant}.sqlite`) : file)
  return {
    kind: 'sqlite',
    config: { kind: 'sqlite', credentials: { url: file } },
    fileOf,
    exists: tenant => fs.existsSync(fileOf(tenant)),
    async query(sql, params = [], tenant) {
      const db = openReadOnly(fileOf(tenant))
      try {
        return db.prepare(sql).all(...params)
      } finally {
        db.close()
      }
    },
    tenants: variant.tenants ?? [undefined]
  }
}

/** Timestamps as PostgreSQL prints them (UTC, as CAP stores them), not as JS Dates in the local time zone. */
const types = { getTypeParser: (oid, format) => (oid === 1114 || oid === 1184 ? String : require('pg').types.getTypeParser(oid, format)) }

async function postgresDatabase(name) {
  const on = await postgresServer()
  await pgServer.createDatabase(name, on)
  const config = pgServer.dbConfig(name, on)
  // The pool stays above the handlers' concurrency (README, "Databases"): renewals and outcomes need connections too.
  // Connecting took longer than @cap-js/postgres's 1 s acquire timeout on this loaded 2-core machine (new processes
  // failed their first requests with "ResourceRequest timed out"): that is the machine, not the queue.
  config.pool = { ...config.pool, max: 30, acquireTimeoutMillis: 5000 }
  return {
    kind: 'postgres',
    config,
    server: on,
    async query(sql, params = []) {
      let n = 0
      const client = new Client({ ...config.credentials, types })
      await client.connect()
      try {
        return (await client.query(sql.replace(/\?/g, () => `$${++n}`), params)).rows
      } finally {
        await client.end().catch(() => {})
      }
    },
    tenants: [undefined]
  }
}

module.exports = { sqliteDatabase, postgresDatabase, stopPostgres }
