const fs = require('fs')
const { newDatabaseFile } = require('../support/app')
const { runOneOff } = require('../support/instances')

/**
 * Multitenancy without @sap/cds-mtxs: `cds.requires.db.multiTenant: true` of @cap-js/sqlite, which cds turns into
 * `cds.requires.multitenancy: true`, gives each tenant a database file of its own, but there is no MTX: no list of
 * subscribed tenants and no tenant t0, which the plugin needs to find each tenant's messages (README, Multitenancy).
 * An app configured so is refused at start, with one error that says what is missing; it never gets to fail a
 * business transaction's commit on the plugin's bookkeeping (before, the tenant's marker went into a t0 database that
 * did not exist: "no such table: cds_outbox_Messages" at the commit of every enqueue in a tenant).
 */
describe('a multitenant database without @sap/cds-mtxs', () => {
  test('the app does not start: one error names what is missing, and no commit fails on the plugin\'s bookkeeping', async () => {
    const url = newDatabaseFile()
    const db = { kind: 'sqlite', credentials: { url }, multiTenant: true }
    const started = runOneOff(db, 'enqueue', { script: 'tenant-enqueue.js', env: { TENANT: 't1' } })
    await expect(started).rejects.toThrow(/tenant-enqueue\.js enqueue exited with 1:\n.*Invalid cds\.requires\.multitenancy: true\. Expected @sap\/cds-mtxs among the app's plugins/)
    await expect(started).rejects.not.toThrow(/no such table|committed/)
    // nothing was written for MTX's tenant, which does not exist here
    expect(fs.existsSync(url.replace(/\.sqlite$/, '-t0.sqlite'))).toBe(false)
  })
})
