import type cds from '@sap/cds'

/**
 * CAP internal: a database service keeps its configuration in `db.options` (`credentials` as `cds.requires.db` has
 * them, incl. the names service bindings use on BTP, and `client` for driver options). The notifier opens a
 * connection of its own outside the pool with the same server, user and TLS. Contract: test/cap/cap-contract.test.js
 * "database options". The SQLite driver is read where @cap-js/sqlite's factory reads it (lib/store/choose.ts).
 */

interface PostgresCredentials {
  host?: string
  hostname?: string
  port?: number | string
  user?: string
  username?: string
  password?: string
  database?: string
  dbname?: string
  ssl?: unknown
  sslrootcert?: string
}

/** Connection settings for `pg`, from the database service's configuration. */
export function postgresConnectionConfig(db: cds.DatabaseService): Record<string, unknown> {
  const options = (db as unknown as { options: { credentials?: PostgresCredentials; client?: Record<string, unknown> } }).options
  const cr = options.credentials ?? {}
  return {
    host: cr.hostname ?? cr.host,
    port: cr.port ?? process.env.PGPORT ?? 5432,
    user: cr.username ?? cr.user,
    password: cr.password,
    database: cr.dbname ?? cr.database,
    ssl: cr.ssl ?? (cr.sslrootcert ? { rejectUnauthorized: false, ca: cr.sslrootcert } : undefined),
    ...options.client
  }
}

/**
 * The SQLite driver @cap-js/sqlite was told to load (`cds.requires.db.driver`, or inside `credentials`, as its
 * factory reads it: 'better-sqlite3', 'node' or 'sql.js'); undefined when it picks one itself.
 */
export function configuredSqliteDriver(db: cds.DatabaseService): string | undefined {
  const options = (db as unknown as { options?: { driver?: unknown; credentials?: { driver?: unknown } } }).options
  const driver = options?.driver ?? options?.credentials?.driver
  return typeof driver === 'string' ? driver : undefined
}

/** better-sqlite3's own default: how long a connection waits for another process's write to commit. */
export const SQLITE_BUSY_TIMEOUT = 5000

/**
 * A process beside the app on its SQLite file (the CLI) must wait for the app's writes, not fail "database is
 * locked", and the app for its: a handler's transaction takes the write lock as it begins (lib/store/dialect.ts
 * `lockWhenBegun`) and must not fail, with an attempt counted, because the CLI is writing. @cap-js/sqlite hands
 * `cds.requires.db.client` to its driver's constructor, and both drivers take `timeout` (the busy timeout, ms).
 * better-sqlite3 (cds 9) waits 5 s unless told; node:sqlite (@cap-js/sqlite 3, cds 10) does not wait at all; `wait`
 * ms here. A `timeout` the project configured is kept. Contract: test/cap/cap-contract.test.js "database options".
 */
export function waitingForOtherWriters(db: { kind?: string; client?: Record<string, unknown> }, wait = SQLITE_BUSY_TIMEOUT): void {
  if (db.kind === 'sqlite') db.client = { timeout: wait, ...db.client }
}
