import type { Dialect } from './dialect'
import { postgres } from './postgres'
import { sqlite } from './sqlite'

/** The dialect of the database of kind `kind` (CAP's `cds.db.kind`): PostgreSQL's, else SQLite's. */
export function dialectFor(kind: string | undefined): Dialect {
  return kind === 'postgres' ? postgres : sqlite
}
