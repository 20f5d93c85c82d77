import { resolve } from 'path'

/** `cds.requires.db`, as the CLI reads it and a database service has it in its `options`. */
export type DatabaseConfig = {
  kind?: string
  client?: Record<string, unknown>
  credentials?: { url?: unknown; uri?: unknown; database?: unknown; host?: unknown; port?: unknown; schema?: unknown }
}

const KIND_NAMES: Record<string, string> = { sqlite: 'SQLite', 'better-sqlite': 'SQLite', postgres: 'PostgreSQL', hana: 'SAP HANA' }

/** The file of a SQLite database, resolved from `root`; undefined for other databases. */
export function sqliteFile(db: DatabaseConfig, root: string): string | undefined {
  if (KIND_NAMES[db.kind ?? ''] !== 'SQLite') return undefined
  const { url, database } = db.credentials ?? {}
  return resolve(root, String(database ?? url))
}

/**
 * A database as its operator recognises it — a file, or a database and its host — so that an empty answer of the
 * CLI from the wrong one (a profile not given) shows, and a log line names where a table is missing. Never
 * credentials: no user, password or URL userinfo.
 */
export function describeDatabase(db: DatabaseConfig, root: string, tenant?: string): string {
  const { url, uri, database, host, port, schema } = db.credentials ?? {}
  const kind = KIND_NAMES[db.kind ?? ''] ?? db.kind ?? 'the'
  const ofTenant = tenant === undefined ? '' : ` (tenant ${tenant})`
  const file = sqliteFile(db, root)
  if (file !== undefined) return `SQLite database ${file}${ofTenant}`
  const link = typeof (url ?? uri) === 'string' && URL.canParse(String(url ?? uri)) ? new URL(String(url ?? uri)) : undefined
  const name = link ? decodeURIComponent(link.pathname.slice(1)) : (database ?? schema)
  const at = link ? link.host : host === undefined ? undefined : `${String(host)}${port === undefined ? '' : `:${String(port)}`}`
  return `${kind} database${name ? ` ${String(name)}` : ''}${at ? ` on ${at}` : ''}${ofTenant}`
}
