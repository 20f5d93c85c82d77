import cds from '@sap/cds'
import { existsSync } from 'fs'
import { join } from 'path'
import { OperatorQueries } from '../ops/queries'
import { SQLITE_BUSY_TIMEOUT, waitingForOtherWriters } from '../cap/database-options'
import { metaTenant } from '../cap/mtxs'
import { connectionFailures } from '../cap/pools'
import { definedProfiles } from '../cap/profiles'
import { disconnect } from '../cap/lifecycle'
import { invalid, QueueError } from '../errors'
import { compileSettings } from '../settings'
import { readDatabaseClock } from '../store/database-time'
import { type DatabaseConfig, describeDatabase, sqliteFile } from '../store/database-name'
import type { Invocation } from './args'
import type { Session } from './commands'
import type { Streams } from './output'
import { clock } from '../time/clock'

/** CAP's loggers whose info lines (connecting, pools) would mix with the CLI's output; warnings still show. */
const QUIET = ['cds', 'db', 'sqlite', 'postgres', 'pool', 'queue']
const PLUGIN = 'cds-event-queues'
const MODEL = join(__dirname, '..', '..', 'db', 'outbox.cds')

/** cds.env as the CLI reads it: which plugins cds found in the project. */
type ProjectEnv = {
  plugins?: Record<string, unknown>
  requires?: { db?: DatabaseConfig }
}

/**
 * The tenant to operate in. A multitenant app (`cds.requires.multitenancy`, also set by `cds.requires.db.multiTenant`)
 * keeps each tenant's messages in that tenant's database, and the database the CLI connects to without one is the
 * provider's, which holds no tenant's messages: there `--tenant` is required. Elsewhere there are no tenants to name.
 */
function tenantOf(command: string, tenant: string | undefined): string | undefined {
  const multitenant = metaTenant(cds.env) !== undefined
  if (multitenant && tenant === undefined) {
    throw invalid(`option --tenant of cds-event-queues ${command}`, tenant, "the tenant whose messages to operate on: in a multitenant app (cds.requires.multitenancy) each tenant's messages are in that tenant's database")
  }
  if (!multitenant && tenant !== undefined) {
    throw invalid(`option --tenant of cds-event-queues ${command}`, tenant, 'no tenant: the project is not multitenant (cds.requires.multitenancy is not set)')
  }
  return tenant
}

/**
 * The profiles `--profile` names must be defined by the project's configuration (or CAP's): cds.env ignores one that
 * is not, and the CLI would read the default database instead, silently.
 */
function checkProfiles(command: string, profile: string | undefined): void {
  if (profile === undefined) return
  const defined = definedProfiles(cds.env)
  const unknown = profile.split(',').map(p => p.trim()).filter(p => !defined.includes(p))
  if (unknown.length) throw invalid(`option --profile of cds-event-queues ${command}`, unknown.join(','), `a profile the project's configuration defines: ${defined.join(', ')}`)
}

/** A database that cannot serve the CLI: it names the database, never credentials, and what to do. */
function unusable(target: string, what: string): Error {
  return new Error(`${target} ${what}`)
}

/** The first statement on the database: where an unreachable one fails, with its reason and the database named. */
async function firstStatement<T>(db: cds.DatabaseService, target: string, run: () => Promise<T>): Promise<T> {
  const failure = connectionFailures(db)
  try {
    return await run()
  } catch (e) {
    const cause = failure() ?? e
    const reason = cause instanceof Error ? `${cause.message}${(cause as { code?: unknown }).code ? ` (${String((cause as { code?: unknown }).code)})` : ''}` : String(cause)
    throw unusable(target, `could not be reached: ${reason}`)
  }
}

/**
 * Connects to the project's database exactly as the app would (`cds.requires.db` of the folder's cds.env and
 * profile), with the queue settings the app compiles, so "dead" means what it means to the app's runner. The
 * plugin's cds-plugin is not loaded: no runner starts, nothing is served.
 */
export async function openSession(streams: Streams, { command, options }: Invocation): Promise<Session & { close(): Promise<void> }> {
  const root = cds.root
  if (!existsSync(join(root, 'package.json'))) {
    throw new QueueError(`${root} is not the folder of a CAP project (no package.json): run cds-event-queues where the app's package.json is.`, 'INVALID_QUEUE_INPUT')
  }
  const env = cds.env as unknown as ProjectEnv
  if (env.plugins && !(PLUGIN in env.plugins)) {
    throw new QueueError(`The project in ${root} does not use ${PLUGIN}: add it with npm add ${PLUGIN}.`, 'INVALID_QUEUE_INPUT')
  }
  checkProfiles(command, options.profile)
  const db = env.requires?.db
  if (!db) throw invalid(`cds.requires.db of the project in ${root}`, db, 'a database configuration (kind and credentials); is the right --profile given?')
  // Only SQLite has in-memory databases: a PostgreSQL profile merged over a project's SQLite `url: ':memory:'` (as
  // `cds.requires.db` merges a profile's credentials into the default's) still names a real database.
  // The error names the one credential that says where, never the object: merged credentials may hold a password.
  const key = db.credentials?.url != null ? 'url' : 'database'
  const location = db.credentials?.[key]
  if (/sqlite/.test(db.kind ?? '') && location === ':memory:') throw invalid(`cds.requires.db.credentials.${key} of the project in ${root}`, location, `a persistent database: an in-memory one (what cds watch starts by default) has no queue to operate on. Give cds.requires.db a file, e.g. "db": { "kind": "sqlite", "credentials": { "url": "db.sqlite" } }, and run cds deploy`)
  for (const id of QUIET) cds.log(id, 'warn')

  const tenant = tenantOf(command, options.tenant)
  const target = describeDatabase(db, root, tenant)
  // Connecting would create an empty SQLite file and fail on the first statement with the driver's words. (A tenant's
  // database is another file, which MTX names.)
  const file = tenant === undefined ? sqliteFile(db, root) : undefined
  if (file !== undefined && !existsSync(file)) throw unusable(target, "does not exist: deploy the app's model to it first (cds deploy)")
  // Invalid queue options stop the CLI as they stop the app: the CLI must judge dead letters by the same limits.
  const settings = compileSettings(cds.env)
  // The table's model, so CQL names its columns as the app does (PostgreSQL folds unquoted names to lower case).
  cds.model = cds.compile.for.nodejs(await cds.load(MODEL))
  // A handler's transaction holds SQLite's write lock while the handler runs (lib/store/dialect.ts `lockWhenBegun`),
  // up to its handlerTimeout: an operator's write waits for the longest of them, never failing because one runs.
  waitingForOtherWriters(db, Math.max(...settings.queues.all().map(q => q.handlerTimeout)) + SQLITE_BUSY_TIMEOUT)
  const connected = (await cds.connect.to('db')) as cds.DatabaseService
  // "now" for revivals and age filters is the database's, as in the app (lib/time/clock.ts)
  clock.adjust(await firstStatement(connected, target, () => readDatabaseClock(connected)))
  return {
    queries: new OperatorQueries(settings.queues, settings.appid, settings.runner.store),
    db: connected,
    database: target,
    tenant,
    streams,
    close: () => disconnect(connected)
  }
}
