import cds from '@sap/cds'
import { maskedForLog } from './secrets'
import { reportedMissingTable } from './store/missing-tables'

/**
 * The plugin's logger, `cds.log('queue')`, with credentials masked in whatever it is given (error messages, stacks
 * and properties of handlers' errors, database errors), so no log line of the plugin carries one. The level and
 * format stay CAP's: each call goes to `cds.log('queue')` as configured at that moment, and nothing is masked for a
 * level that is off. An error that a table of the plugin is missing is logged as one line (store/missing-tables.ts).
 */
type Level = 'error' | 'warn' | 'info' | 'debug'

function write(level: Level): (...args: unknown[]) => void {
  return (...args) => {
    const log = cds.log('queue')
    // before `cds deploy` every path fails on a missing table: one line a minute says it, not a stack trace each
    if (level !== 'debug' && reportedMissingTable(args, line => log._error && log.error(line))) return
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
