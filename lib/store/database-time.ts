import cds from '@sap/cds'
import { performance } from 'perf_hooks'
import { currentConnection } from '../cap/transactions'
import { clock, type ClockReading } from '../time/clock'
import { nativeDialect } from './choose'
import { dialectFor } from './dialects'
import { ENTITY } from './rules'
import { millis } from './rows'

/**
 * Reads the database's clock (for lib/time/clock.ts), in the current transaction if there is one; the round trip
 * counted is the statement's alone, its transaction begun before. SQLite and PostgreSQL say their time to the
 * millisecond with a statement of their dialect, whichever store runs the queue. Elsewhere CQL's `current_timestamp`
 * (the database's function: CQL's `$now` is the event context's timestamp, the process's own clock); on SAP HANA that
 * is the server's local time, UTC on SAP HANA Cloud. It needs the queue's table there: CQL has no query without one.
 */
export async function readDatabaseClock(db: cds.DatabaseService): Promise<ClockReading> {
  // the statement is the database's, whatever the driver: sql.js has no native store, and CQL's current_timestamp is
  // SQLite's CURRENT_TIMESTAMP there, whole seconds, which put the queue's clock up to a second behind the rows it wrote
  const ofKind = SQL_DIALECT_KINDS.includes(db.kind) ? dialectFor(db.kind) : undefined
  const sql = ofKind && `SELECT ${ofKind.isoText(ofKind.now)} AS "now"`
  const dialect = nativeDialect(db)
  const connection = dialect && (await currentConnection())
  const sent = performance.now()
  let value: unknown
  if (dialect && sql && connection) value = (await dialect.execute(connection, sql, [], true)).rows[0].now
  else if (sql) value = ((await db.run(sql)) as { now: unknown }[])[0].now
  else value = ((await db.run(SELECT.one.from(ENTITY).columns('count(1) as rows', CURRENT_TIMESTAMP))) as { now: unknown }).now
  const received = performance.now()
  const time = value instanceof Date ? value.getTime() : millis(value)
  if (Number.isNaN(time)) throw new Error(`cds-event-queues: the database's clock said ${String(value)}, which is not a time`)
  return { time, sent, received }
}

/**
 * Reads the database's clock, in the current transaction, if this process has not read it yet: before the first row it
 * stamps with the queue's time (lib/time/clock.ts). The runner reads it at its first pass, which on a loaded machine
 * comes seconds after the app serves, and a script that only queues runs no runner; until then the rows' times were
 * the process's own clock's (a script 40 s behind wrote rows 40 s old: test/runner/clock-skew.test.js). Once read, `clock.read`
 * stays true and this costs no statement.
 */
export async function ensureDatabaseClock(db: cds.DatabaseService): Promise<void> {
  if (!clock.read) clock.adjust(await readDatabaseClock(db))
}

/** The kinds whose dialect (store/dialect.ts) says the time to the millisecond. */
const SQL_DIALECT_KINDS = ['sqlite', 'postgres']

/** A column of CAP's standard function (cds-types knows column names only). */
const CURRENT_TIMESTAMP = { func: 'current_timestamp', as: 'now' } as never
