import cds from '@sap/cds'
import { TABLE } from '../store/rules'

/**
 * What the runner uses of @sap/cds-mtxs, the multitenancy of capire's guide: `cds.requires.multitenancy` switches it
 * on; `cds.requires.multitenancy.t0` (default 't0') names the tenant MTX keeps its own data in, whose database has
 * CAP's `cds.outbox.Messages` (CAP writes its queue's markers there); the DeploymentService lists the subscribed
 * tenants (`getTenants()`, in process or in an MTX sidecar) and, served in process, runs `subscribe` and
 * `unsubscribe` with `req.data.tenant`. t0's table has none of the columns this plugin adds, and CQL inserts every
 * column the model knows; an INSERT into a table name the model does not know inserts just the columns given. MTX
 * comes as a plugin: `cds.env.plugins` lists it. Contract: test/multitenancy/multitenancy.sqlite.test.js "mtxs".
 */

const DEPLOYMENT = 'cds.xt.DeploymentService'
const MTXS = '@sap/cds-mtxs'

/** The tenant MTX keeps its own data in, or undefined where the app is not multitenant. */
export function metaTenant(env: { requires?: Record<string, unknown> } = cds.env): string | undefined {
  const multitenancy = env.requires?.multitenancy as { t0?: string } | boolean | undefined
  if (!multitenancy) return undefined
  return (typeof multitenancy === 'object' && multitenancy.t0) || 't0'
}

/**
 * Whether @sap/cds-mtxs is among the app's plugins: `cds.env.plugins` lists the packages cds loads as plugins from the
 * app's dependencies (devDependencies outside production), MTX's services and its tenant t0 come with it.
 */
export function mtxsIsPlugin(env: { plugins?: Record<string, unknown> } = cds.env as { plugins?: Record<string, unknown> }): boolean {
  return !!env.plugins && MTXS in env.plugins
}

/** The tenants subscribed to the app (without MTX's own). */
export async function subscribedTenants(): Promise<string[]> {
  const deployment = (await cds.connect.to(DEPLOYMENT)) as unknown as { getTenants(): Promise<string[]> }
  const t0 = metaTenant()
  return (await deployment.getTenants()).filter(t => t !== t0)
}

export interface SubscriptionListener {
  subscribed(tenant: string): void
  unsubscribing(tenant: string): void
  unsubscribed(tenant: string): void
}

/**
 * Tells `listener` of subscriptions where the DeploymentService is served in this process: after a tenant's
 * deployment succeeded, before a tenant's database is removed (its messages must stop being claimed first), and
 * after it was removed.
 */
export function onSubscriptions(listener: SubscriptionListener): void {
  const tenantOf = (req: cds.Request) => (req.data as { tenant: string }).tenant
  // CAP emits 'serving:<name>' for each service it serves; its types know only the fixed event names
  ;(cds as unknown as { on(event: string, fn: (ds: cds.Service) => void): void }).on(`serving:${DEPLOYMENT}`, ds => {
    ds.after('subscribe', (_: unknown, req: cds.Request) => listener.subscribed(tenantOf(req)))
    ds.before('unsubscribe', (req: cds.Request) => listener.unsubscribing(tenantOf(req)))
    ds.after('unsubscribe', (_: unknown, req: cds.Request) => listener.unsubscribed(tenantOf(req)))
  })
}

/** Inserts `row` into t0's `cds.outbox.Messages` (in the current transaction): exactly its columns, CAP's. */
export async function insertIntoMetaTenant(row: Record<string, string | null>): Promise<void> {
  const columns = Object.keys(row)
  await INSERT.into(TABLE).columns(...columns).rows([columns.map(c => row[c])])
}
