import cds from '@sap/cds'
import { describeDatabase, type DatabaseConfig } from './database-name'
import { dialectFor } from './dialects'

/**
 * An app served before `cds deploy` has none of the queue's tables: every path that reads one (claims, index
 * creation, reconciliation, statistics, the ops page) fails with the same cause. Such errors are told apart here, once,
 * so that the log says it in one line (see lib/log.ts) and the health check names it, instead of a stack trace each.
 */

/** The plugin's tables, by their names in lower case (PostgreSQL folds unquoted names): the name as deployed. */
function pluginTables(): Map<string, string> {
  const names = Object.keys(cds.model?.definitions ?? {}).filter(name => name.startsWith('cds.outbox.'))
  return new Map(names.map(name => name.replace(/\./g, '_')).map(table => [table.toLowerCase(), table]))
}

/** The plugin's table whose absence `error` reports, in the current database's words; undefined for any other error. */
export function missingTable(error: unknown): string | undefined {
  // not `instanceof Error`: a driver's error class may come from another realm (a native module loaded once)
  const { message, code } = (error ?? {}) as { message?: unknown; code?: unknown }
  if (typeof message !== 'string') return undefined
  const table = dialectFor(cds.db?.kind).missingTable({ message, code })
  return table === undefined ? undefined : pluginTables().get(table.toLowerCase())
}

/** Where a table is missing: the tenant's database, or the app's (no credentials). */
function whereMissing(tenant: string | undefined): string {
  const db = (cds.db as { options?: DatabaseConfig } | undefined)?.options
  return tenant !== undefined ? ` in the database of tenant ${tenant}` : db ? ` in ${describeDatabase(db, cds.root)}` : ''
}

/** What to do about the missing `table`, and where it is missing. */
export function missingTableLine(table: string, tenant: string | undefined): string {
  return `table ${table} missing${whereMissing(tenant)}: run cds deploy`
}

/** A missing table is logged at most this often per database: the runner and the ops page keep trying meanwhile. */
const REPEAT_AFTER = 60_000
const reportedAt = new Map<string, number>()

/**
 * Whether a log call's `args` report a missing table of the plugin; if so, `report` gets its one line, unless that
 * database's was reported less than a minute ago. The tenant is the current context's, where a path logs within it.
 */
export function reportedMissingTable(args: unknown[], report: (line: string) => void): boolean {
  const table = args.map(missingTable).find(Boolean)
  if (table === undefined) return false
  const tenant = cds.context?.tenant ?? undefined
  const where = whereMissing(tenant)
  const now = Date.now()
  if (now - (reportedAt.get(where) ?? -Infinity) >= REPEAT_AFTER) {
    reportedAt.set(where, now)
    report(missingTableLine(table, tenant))
  }
  return true
}
