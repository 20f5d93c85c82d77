/**
 * The deployments a seed runs on: the database, the store, and whether the app is multitenant (cds-mtxs, a SQLite
 * file per tenant). SQLite variants run one app process: the README supports one processing process per SQLite
 * file (the CLI may run beside it); PostgreSQL variants run two or three.
 */

const VARIANTS = {
  sqlite: { db: 'sqlite', store: 'native', processes: [1, 1] },
  'sqlite-portable': { db: 'sqlite', store: 'portable', processes: [1, 1] },
  postgres: { db: 'postgres', store: 'native', processes: [2, 3] },
  'postgres-portable': { db: 'postgres', store: 'portable', processes: [2, 3] },
  mtx: { db: 'sqlite', store: 'native', processes: [1, 1], tenants: ['t1', 't2', 't3'] },
  'mtx-portable': { db: 'sqlite', store: 'portable', processes: [1, 1], tenants: ['t1', 't2', 't3'] }
}

/**
 * Which services a tenant's workload uses: disjoint, so an operator answer naming another tenant's service or queue
 * is a leak (I8). Single-tenant variants use them all.
 */
const TENANT_SERVICES = {
  t1: ['Orders', 'Archive', 'Ticker'],
  t2: ['Ledger', 'Billing'],
  t3: ['Mailer']
}
const ALL_SERVICES = ['Orders', 'Ledger', 'Mailer', 'Billing', 'Archive', 'Clerk', 'Ticker']
/** From generator 31 on, every tenant's workload also uses these: the default queue's name is every tenant's (I8 counts). */
const SHARED_SERVICES = ['Clerk']

/**
 * The queue each service's messages are stored under (`target`), as the app's package.json configures them; `broker`
 * is the messaging service of the consumer half (its events keyed by `orderKey`, so a queue of its own).
 */
const QUEUE_OF = { Orders: 'Orders', Ledger: 'Ledger', Mailer: 'remote', Billing: 'Billing', Archive: 'queue', Clerk: 'queue', Ticker: 'queue', broker: 'broker' }

/** Mocked users: `driver` calls the app, `ops` the operator service; per tenant in the multitenant variants. */
function users(variant) {
  if (!variant.tenants) return { driver: { roles: ['internal-user'] }, ops: { roles: ['internal-user'] } }
  const perTenant = variant.tenants.flatMap(t => [
    [`driver-${t}`, { tenant: t, roles: ['internal-user'] }],
    [`ops-${t}`, { tenant: t, roles: ['internal-user'] }]
  ])
  return { ...Object.fromEntries(perTenant), yves: { roles: ['internal-user', 'cds.Subscriber'] } }
}

const driverOf = tenant => (tenant ? `driver-${tenant}` : 'driver')
const operatorOf = tenant => (tenant ? `ops-${tenant}` : 'ops')

module.exports = { VARIANTS, TENANT_SERVICES, ALL_SERVICES, SHARED_SERVICES, QUEUE_OF, users, driverOf, operatorOf }
