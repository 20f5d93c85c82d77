import cds from '@sap/cds'

/**
 * CAP internal: `cds.shutdown` disconnects every database service (`db.disconnect()`) at the same moment it emits
 * 'shutdown', destroying the connections running handlers still use. Replacing `disconnect` on the instance lets the
 * runner finish or hand back its messages first. Contract: test/cap/cap-contract.test.js "disconnect".
 */
export function beforeDisconnect(db: cds.DatabaseService, before: () => Promise<void> | undefined): void {
  const service = db as unknown as { disconnect(tenant?: string): Promise<void> }
  const disconnect = service.disconnect.bind(service)
  service.disconnect = async (tenant?: string) => {
    if (!tenant) await before()
    return disconnect(tenant)
  }
}

/** Closes the database service's connections (its pool), as `cds.shutdown` does: a one-off process can then exit. */
export function disconnect(db: cds.DatabaseService): Promise<void> {
  return (db as unknown as { disconnect(): Promise<void> }).disconnect()
}

/**
 * CAP: `cds serve` (behind `cds run`, `cds watch` and `cds.test` too; `cds.cli.command` 'serve') emits 'listening'
 * only after every 'served' handler succeeded and the HTTP server listens; CAP's own messaging services start
 * consuming then. When a 'served' handler of the app fails, it prints the error and leaves the process to end by
 * itself, so nothing may have started by then that holds it open (a claim's pooled connection, the LISTEN
 * connection). Calls `started` at 'listening' there, at 'served' where the app serves itself. Contract:
 * test/cap/cap-contract.test.js "lifecycle", test/runner/startup.test.js.
 */
export function onStarted(started: () => void): void {
  cds.on('served', () => {
    if (cds.cli?.command === 'serve') cds.once('listening', started)
    else started()
  })
}

let listening = false
cds.once('listening', () => (listening = true))

/**
 * Runs `fn` once the app serves: at 'listening', or now if it came already (a service connected later, lazily). CAP's
 * messaging services start consuming at 'listening', when the app's subscriptions are registered.
 */
export function whenListening(fn: () => void): void {
  if (listening) fn()
  else cds.once('listening', fn)
}
