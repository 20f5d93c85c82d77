import cds from '@sap/cds'
import { installApi } from './lib/api/install'
import { warnIfQueuedDatabase } from './lib/api/queued'
import { registerTarballBuild } from './lib/build/tarball'
import { queueMessagingImpls } from './lib/cap/connect-options'
import { beforeDisconnect, onStarted } from './lib/cap/lifecycle'
import { waitingForOtherWriters } from './lib/cap/database-options'
import { surviveEndedCopies } from './lib/cap/parameter-streams'
import { survivePoolErrors } from './lib/cap/pools'
import { isDatabaseService } from './lib/cap/services'
import { announceOpsPage, mountOpsPage } from './lib/ops/page'
import { activate, queueObservations } from './lib/plugin'
import { serveIdempotent } from './lib/receipts/idempotent'
import { OPERATOR_ENTRY, persists } from './lib/settings'
import { failingStart } from './lib/start-failure'
import { warnAboutEntriesWithoutService, warnAboutMisplacedReceivers } from './lib/unused-settings'
import { observeQueues } from './lib/telemetry/metrics'
import { brokerWaits } from './lib/runner/broker-waits'
import { LOG } from './lib/log'

// Wiring only: what the plugin does lives in lib/.

// Without persistence there is no table, hence nothing for the operator service to show.
if (!persists(cds.env) && cds.env.requires) cds.env.requires[OPERATOR_ENTRY] = false

// `cds build` and `cds compile` only need the models; options that matter at run time are checked when the app runs.
const building = ['build', 'compile'].includes((cds as unknown as { cli?: { command?: string } }).cli?.command ?? '')

if (building) registerTarballBuild()
else {
  // The settings are compiled here, once; a configuration error stops the start.
  const plugin = failingStart(() => activate(cds.env))
  installApi(plugin)
  const db = cds.env.requires?.db as Parameters<typeof waitingForOtherWriters>[0] | undefined
  if (db) waitingForOtherWriters(db)
  // Every messaging service is queued by default, also one the app configures with an `impl` of its own.
  if (cds.env.requires) queueMessagingImpls(cds.env.requires)

  // Operations marked @idempotent answer a repeated Idempotency-Key from their record (lib/receipts).
  const { persistent, appid, queues } = plugin.settings
  const idempotent = persistent
    ? { store: () => plugin.runner.store, appid, retention: queues.defaultQueue.receiptRetention, multitenant: () => plugin.runner.tenants.multitenant }
    : undefined
  cds.on('serving', srv => failingStart(() => serveIdempotent(srv, idempotent)))
  // The ops page comes with the operator service and is restricted like it.
  if (cds.env.requires?.[OPERATOR_ENTRY]) {
    cds.on('bootstrap', app => mountOpsPage(app, plugin.settings.operatorRoles))
    cds.on('listening', ({ url }: { url: string }) => announceOpsPage(url, plugin.settings.operatorRoles))
  }
  // Once the app has started: a start that failed in one of the app's 'served' handlers must end the process.
  onStarted(() => {
    plugin.runner.start().catch(e => LOG.error('the event queue runner could not start:', e))
    if (plugin.settings.persistent) plugin.retention.start()
    observeQueues(queueObservations(plugin), () => brokerWaits.current)
  })
  cds.on('shutdown', () => {
    observeQueues(undefined)
    return plugin.runner.stop()
  })
  // Settings no service takes (a misspelt service name, inboxed on a service that receives nothing) get a warning.
  cds.on('served', () => warnAboutEntriesWithoutService(cds.env.requires ?? {}))
  cds.on('connect', srv => {
    if (!isDatabaseService(srv)) return warnAboutMisplacedReceivers(srv, plugin.settings.receivers)
    warnIfQueuedDatabase(srv)
    survivePoolErrors(srv)
    surviveEndedCopies(srv)
    failingStart(() => plugin.runner.connected(srv))
    // CAP disconnects databases on 'shutdown' at the same moment it stops the runner: the runner's handlers need
    // their connections until they finish or are handed back, and a cleanup its connection until its batch is done.
    // Only the primary database holds the queue: an app's other database services come and go without it.
    const primary = () => srv === cds.db
    beforeDisconnect(srv, () => (primary() && plugin.runner.stopsWithDatabase ? plugin.runner.stop() : undefined))
    beforeDisconnect(srv, () => (primary() ? plugin.retention.stop() : undefined))
  })
}
