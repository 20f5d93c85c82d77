import cds from '@sap/cds'
import { installApi } from './lib/api'
import { validateConfiguration } from './lib/config'
import { runner } from './lib/runner'

const LOG = cds.log('queue')

// Wiring only: what the plugin does lives in lib/.
validateConfiguration()
installApi()

cds.on('served', () => {
  runner.start().catch(e => LOG.error('the event queue runner could not start:', e))
})
cds.on('shutdown', () => runner.stop())
