/**
 * Where SQLite and PostgreSQL differ for the queue's statements. Everything else in the store is plain SQL that
 * both accept (unquoted identifiers, `?` placeholders translated here, ON CONFLICT, CASE, ||).
 */
export interface Dialect {
  readonly name: string
  /** The SQL as the driver wants it (placeholders). */
  prepare(sql: string): string
  /** Appended to the claim's row selection so concurrent claimers skip rows another one is claiming. */
  readonly skipLocked: string
}

const sqlite: Dialect = {
  name: 'sqlite',
  prepare: sql => sql,
  // SQLite has one writer at a time: the claim's UPDATE is atomic without row locks.
  skipLocked: ''
}

const postgres: Dialect = {
  name: 'postgres',
  prepare: sql => {
    let n = 0
    return sql.replace(/\?/g, () => `$${++n}`)
  },
  skipLocked: 'FOR UPDATE SKIP LOCKED'
}

export function dialectFor(kind: string | undefined): Dialect {
  return kind === 'postgres' ? postgres : sqlite
}
