import { executeOnSqlite } from '../cap/drivers'
import type { Dialect } from './dialect'
import { TABLE } from './rules'

export const sqlite: Dialect = {
  prepare: sql => sql,
  // SQLite has one writer at a time: the claim's UPDATE is atomic without row locks.
  skipLocked: '',
  // SQLite runs a non-correlated IN subquery once (EXPLAIN QUERY PLAN: LIST SUBQUERY) and looks each ID up in the key
  idIn: select => `ID IN (${select})`,
  // Stored as ISO text by the store; no conversion. No wake-up: SQLite has no notifications between processes.
  isoText: column => column,
  // the format the store writes timestamps in; CURRENT_TIMESTAMP has whole seconds only
  now: "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
  timestamp: value => value,
  indexesOf: table => `SELECT name AS "name" FROM sqlite_master WHERE type = 'index' AND tbl_name = '${table}'`,
  renewsOutsideThePool: false,
  // a write that changes nothing: BEGIN IMMEDIATE within the transaction CAP began (deferred)
  writeLock: `UPDATE ${TABLE} SET ID = ID WHERE 1 = 0`,
  execute: executeOnSqlite,
  // its code, SQLITE_ERROR, is that of any error: only the message tells; the table may carry its schema ("main.")
  missingTable: ({ message }) => /\bno such table: (?:\w+\.)?(\w+)/.exec(message)?.[1]
}
