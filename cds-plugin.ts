import cds from '@sap/cds'
import { installApi } from './lib/api'
import { isPersistent, validateConfiguration } from './lib/config'
import { survivePoolErrors } from './lib/pool-errors'
import { runner } from './lib/runner'

const LOG = cds.log('queue')

// Wiring only: what the plugin does lives in lib/.
validateConfiguration()
installApi()

// Without persistence there is no table, hence nothing for the dead-letter service to show.
if (!isPersistent() && cds.env.requires) cds.env.requires['dead-letter-queue'] = false

cds.on('served', () => {
  runner.start().catch(e => LOG.error('the event queue runner could not start:', e))
})
cds.on('shutdown', () => runner.stop())
cds.on('connect', srv => {
  if (!(srv instanceof cds.DatabaseService)) return
  survivePoolErrors(srv)
  runner.stopsBefore(srv)
})
