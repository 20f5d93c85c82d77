import type cds from '@sap/cds'
import { configuredSqliteDriver } from '../cap/database-options'
import type { Watchers } from '../cap/handlers'
import { QueueError } from '../errors'
import type { StoreChoice } from '../interfaces'
import type { Dialect } from './dialect'
import { dialectFor } from './dialects'
import { NativeStore } from './native'
import { PortableStore } from './portable'
import type { QueueStore } from './queue-store'

/**
 * Which store runs the queue on a database: the native one where the database has a fast path (raw SQL on the driver
 * connections of @cap-js/sqlite with better-sqlite3 or node:sqlite, and of @cap-js/postgres), the portable one (CQL
 * only) everywhere else, e.g. SAP HANA, sql.js or a database service of another vendor.
 */

/** SQLite drivers whose connections the native store knows (lib/cap/drivers.ts); undefined: @cap-js/sqlite's default one. */
const NATIVE_SQLITE_DRIVERS = [undefined, 'better-sqlite3', 'node']

/** The dialect of the native store on `db`, or undefined where the database has no fast path. */
export function nativeDialect(db: cds.DatabaseService): Dialect | undefined {
  if (db.kind === 'postgres') return dialectFor('postgres')
  if (db.kind === 'sqlite' && NATIVE_SQLITE_DRIVERS.includes(configuredSqliteDriver(db))) return dialectFor('sqlite')
  return undefined
}

/** What `db` is, in words, for error messages and logs. */
function describeDatabase(db: cds.DatabaseService): string {
  const driver = db.kind === 'sqlite' ? configuredSqliteDriver(db) : undefined
  return `kind '${db.kind}'${driver ? ` with driver '${driver}'` : ''}`
}

/** Whether `choice` makes the runner use the portable store on `db`; throws when `native` was asked for where there is none. */
export function usesPortableStore(choice: StoreChoice, db: cds.DatabaseService): boolean {
  const native = nativeDialect(db)
  if (choice === 'native' && !native) {
    throw new QueueError(
      `Invalid cds.requires.queue.store: "native". The database (${describeDatabase(db)}) has no native store: it exists ` +
        `for SQLite (better-sqlite3, node:sqlite) and PostgreSQL. Expected 'auto' or 'portable' here.`,
      'INVALID_QUEUE_INPUT'
    )
  }
  return choice === 'portable' || !native
}

/** The store for `db` as `choice` says. */
export function storeFor(choice: StoreChoice, db: cds.DatabaseService, appid: string | undefined, watchers?: Watchers): QueueStore {
  if (usesPortableStore(choice, db)) return new PortableStore(appid, nativeDialect(db))
  return new NativeStore(db.kind, appid, watchers)
}
