const cds = require('@sap/cds')

// The multitenant app (test/mt-app) as capire's multitenancy guide runs it: tenants are subscribed through the MTX
// provisioning API and each suite works in a tenant's context.

/** Subscribes `tenant` as SaaS provisioning does (the subscription manager's callback) through cds.test's `PUT`. */
async function subscribe({ PUT }, tenant) {
  const res = await PUT(`/-/cds/saas-provisioning/tenant/${tenant}`, { subscribedSubdomain: tenant, eventType: 'CREATE' }, { auth: { username: 'yves' }, validateStatus: () => true })
  if (res.status >= 300) throw new Error(`subscribing ${tenant} failed: ${res.status} ${JSON.stringify(res.data)}`)
}

/** Runs `fn` in a transaction of `tenant`, as a privileged user. */
const inTenant = (tenant, fn) => cds.tx({ tenant, user: new cds.User.Privileged() }, fn)

module.exports = { subscribe, inTenant }
