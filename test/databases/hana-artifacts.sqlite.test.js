const { execFile } = require('child_process')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { promisify } = require('util')

/**
 * SAP HANA cannot run here, so what HANA gets is checked where it is made: the artifacts `cds compile` and
 * `cds build --for hana` generate (@sap/cds-dk, the CLI CAP projects build with). The portable store's claim needs
 * the index of db/hana.cds; the example app gets it through `cds.requires.kinds.hana.model` of the plugin, as any
 * project whose production database is HANA. Runs in the "sqlite" jest project only (nothing here touches a database).
 */
const ROOT = path.join(__dirname, '..', '..')
const EXAMPLE = path.join(ROOT, 'examples', 'travel')
const cli = (args, cwd) => promisify(execFile)(process.execPath, [require.resolve('@sap/cds-dk/bin/cds.js'), ...args], { cwd, timeout: 120000 })

const COLUMNS = ['dueAt TIMESTAMP DEFAULT CURRENT_TIMESTAMP', 'claimedBy NVARCHAR(255)', 'claimedAt TIMESTAMP', 'interrupted INTEGER DEFAULT 0', 'orderingKey NVARCHAR(255)', 'service NVARCHAR(255)', 'event NVARCHAR(255)', 'sequence BIGINT']
const INDEX = 'UNIQUE INVERTED INDEX cds_outbox_Messages_due ON cds_outbox_Messages (appid, dueAt, ID)'

describe('SAP HANA artifacts', () => {
  test('cds compile db/outbox.cds --to hana: the table with CAP\'s columns and the plugin\'s', async () => {
    const { stdout } = await cli(['compile', 'db/outbox.cds', '--to', 'hana'], ROOT)
    expect(stdout).toContain('COLUMN TABLE cds_outbox_Messages (')
    for (const column of ['msg NCLOB', 'attempts INTEGER DEFAULT 0', 'lastAttemptTimestamp TIMESTAMP', 'status NVARCHAR(23)', ...COLUMNS]) expect(stdout).toContain(column)
    // the claim's index is HANA's only: db/hana.cds, not part of the model other databases deploy (the receipts'
    // pruning index is a unique constraint of the model, deployed on every database)
    expect(stdout).not.toContain('INDEX cds_outbox_Messages')
    expect(stdout).toContain('UNIQUE INVERTED INDEX cds_outbox_Receipts_expiry ON cds_outbox_Receipts (expiresAt, scope, ID)')
  })

  test('cds compile db/hana.cds --to hana adds the claim\'s index as an .hdbindex', async () => {
    const { stdout } = await cli(['compile', 'db/hana.cds', '--to', 'hana'], ROOT)
    expect(stdout).toContain('----- cds.outbox.Messages.due.hdbindex -----')
    expect(stdout).toContain(INDEX)
  })

  test('cds build --for hana --production of the example app generates the table, the index and its HDI plugin', async () => {
    const dest = fs.mkdtempSync(path.join(os.tmpdir(), 'event-queues-hana-'))
    try {
      await cli(['build', '--for', 'hana', '--production', '--dest', dest], EXAMPLE)
      const gen = path.join(dest, 'src', 'gen')
      const table = fs.readFileSync(path.join(gen, 'cds.outbox.Messages.hdbtable'), 'utf8')
      for (const column of COLUMNS) expect(table).toContain(column)
      expect(fs.readFileSync(path.join(gen, 'cds.outbox.Messages.due.hdbindex'), 'utf8').trim()).toBe(INDEX)
      const hdiconfig = JSON.parse(fs.readFileSync(path.join(gen, '.hdiconfig'), 'utf8'))
      expect(hdiconfig.file_suffixes.hdbindex).toEqual({ plugin_name: 'com.sap.hana.di.index' })
      // the operator service's views come along, and the queue controls (pauses, breakers, rate windows)
      expect(fs.existsSync(path.join(gen, 'EventQueuesService.DeadOutboxMessages.hdbview'))).toBe(true)
      expect(fs.readFileSync(path.join(gen, 'cds.outbox.QueueControls.hdbtable'), 'utf8')).toMatch(/PRIMARY KEY\(appid, queue\)/)
    } finally {
      fs.rmSync(dest, { recursive: true, force: true })
    }
  })
})
