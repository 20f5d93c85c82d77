import cds from '@sap/cds'
import { maskedForLog } from './secrets'

/**
 * The plugin's logger, `cds.log('queue')`, with credentials masked in whatever it is given (error messages, stacks
 * and properties of handlers' errors, database errors), so no log line of the plugin carries one. The level and
 * format stay CAP's: each call goes to `cds.log('queue')` as configured at that moment, and nothing is masked for a
 * level that is off. A filter may take a call over and log it its own way: the store's makes an error that a table of
 * the plugin is missing one line (store/missing-tables.ts, registered by store/index.ts).
 */
type Level = 'error' | 'warn' | 'info' | 'debug'

/** Takes a log call's `args` over (true) and logs what it says through `report`, or leaves it to the log (false). */
export type LogFilter = (args: unknown[], report: (line: string) => void) => boolean

const filters: LogFilter[] = []

/** Adds `filter` to those asked first about every error, warning and info line. */
export function filterLog(filter: LogFilter): void {
  if (!filters.includes(filter)) filters.push(filter)
}

function write(level: Level): (...args: unknown[]) => void {
  return (...args) => {
    const log = cds.log('queue')
    if (level !== 'debug' && filters.some(filter => filter(args, line => log._error && log.error(line)))) return
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
