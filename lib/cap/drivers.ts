import cds from '@sap/cds'
import { createHash } from 'crypto'
import { createRequire } from 'module'

/**
 * CAP internal: what `tx.dbc` is. @cap-js/sqlite hands out a better-sqlite3 `Database` (v2) or its wrapper around
 * `node:sqlite` (v3), both with `prepare(sql).run/all(params)`; @cap-js/postgres a `pg` `Client`.
 * Contract: test/cap/cap-contract.test.js "driver connections".
 */

export interface Result {
  rows: Record<string, unknown>[]
  changes: number
}

/** A prepared statement of the SQLite drivers @cap-js/sqlite uses. */
interface SqliteStatement {
  run(params: unknown[]): { changes: number | bigint }
  all(params: unknown[]): Record<string, unknown>[]
}

interface SqliteConnection {
  prepare(sql: string): SqliteStatement
}

/** Statements prepared once per SQLite connection: preparing costs more than running the queue's small statements. */
const prepared = new WeakMap<SqliteConnection, Map<string, SqliteStatement>>()
/** The store's statement texts are few, but IN lists vary in length: a bound keeps the cache from growing with them. */
const MAX_PREPARED = 256

function statementOn(connection: SqliteConnection, sql: string): SqliteStatement {
  let statements = prepared.get(connection)
  if (!statements) prepared.set(connection, (statements = new Map()))
  let statement = statements.get(sql)
  if (!statement) {
    if (statements.size >= MAX_PREPARED) statements.clear()
    statements.set(sql, (statement = connection.prepare(sql)))
  }
  return statement
}

/** Runs one statement on a SQLite connection of @cap-js/sqlite: the rows it reads (`reads`), or the rows it changed. */
export async function executeOnSqlite(connection: unknown, sql: string, params: unknown[], reads: boolean): Promise<Result> {
  const statement = statementOn(connection as SqliteConnection, sql)
  if (reads) return { rows: statement.all(params), changes: 0 }
  return { rows: [], changes: Number(statement.run(params).changes) }
}

/** `pg`'s Client class as @cap-js/postgres resolves it (its own dependency, maybe not the app's `pg`). */
export function postgresClient<C = unknown>(): C {
  const fromPostgresService = createRequire(require.resolve('@cap-js/postgres', { paths: [cds.root, __dirname] }))
  return (fromPostgresService('pg') as { Client: C }).Client
}

interface PgClient {
  query(config: { name: string; text: string; values: unknown[] }): Promise<{ rows: Record<string, unknown>[]; rowCount: number | null }>
}

/**
 * Named statements are parsed and planned once per connection (the claim's plan is not cheap). The store's texts
 * come from a small set (IN lists up to the batch size, the queues skipped by a claim), so the names stay few.
 */
const statementNames = new Map<string, string>()
function statementName(sql: string): string {
  let name = statementNames.get(sql)
  if (!name) statementNames.set(sql, (name = 'cds_event_queues_' + createHash('sha1').update(sql).digest('hex')))
  return name
}

/** Runs one statement on a `pg` client of @cap-js/postgres, as a named prepared statement. */
export async function executeOnPostgres(connection: unknown, sql: string, params: unknown[]): Promise<Result> {
  const { rows, rowCount } = await (connection as PgClient).query({ name: statementName(sql), text: sql, values: params })
  return { rows, changes: rowCount ?? 0 }
}
