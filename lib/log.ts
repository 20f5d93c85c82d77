import cds from '@sap/cds'
import { maskedForLog } from './secrets'

/**
 * The plugin's logger, `cds.log('queue')`, with credentials masked in whatever it is given (error messages, stacks
 * and properties of handlers' errors, database errors), so no log line of the plugin carries one. The level and
 * format stay CAP's: each call goes to `cds.log('queue')` as configured at that moment, and nothing is masked for a
 * level that is off.
 */
type Level = 'error' | 'warn' | 'info' | 'debug'

function write(level: Level): (...args: unknown[]) => void {
  return (...args) => {
    const log = cds.log('queue')
    if (log[`_${level}`]) log[level](...args.map(maskedForLog))
  }
}

export const LOG = {
  error: write('error'),
  warn: write('warn'),
  info: write('info'),
  debug: write('debug'),
  /** Guard for debug lines that cost something to build. */
  get _debug(): boolean {
    return cds.log('queue')._debug
  }
}
