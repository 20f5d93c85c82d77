import cds from '@sap/cds'

/**
 * CAP internals about the request log: each protocol adapter logs every request it receives with
 * `cds.log(<protocol>).info(method, path, query)` from a middleware of its own (lib/srv/protocols/http.js `logger`),
 * with no option to leave a request out. The adapter reads `info` from the cached logger at each request, and
 * `cds.log(id, level)` re-assigns a logger's methods onto that same object (`Object.assign`) when its level changes.
 * So `info` becomes an accessor: what CAP assigns is kept, and what it reads is that function behind the filters.
 * Contract: test/cap/cap-contract.test.js "request log".
 */

type Log = (...args: unknown[]) => void
const filters = new WeakMap<object, Array<() => boolean>>()

/** From now on, the `protocol`'s info lines are not written while `leaveOut()` says so (it sees `cds.context`). */
export function leaveOutOfRequestLog(protocol: string, leaveOut: () => boolean): void {
  const logger = cds.log(protocol) as unknown as { info: Log }
  const installed = filters.get(logger)
  if (installed) return void installed.push(leaveOut)
  const own: Array<() => boolean> = [leaveOut]
  filters.set(logger, own)
  let info = logger.info
  const filtered: Log = (...args) => {
    if (!own.some(skip => skip())) info(...args)
  }
  Object.defineProperty(logger, 'info', {
    configurable: true,
    enumerable: true,
    get: () => filtered,
    set: (fn: Log) => (info = fn)
  })
}
