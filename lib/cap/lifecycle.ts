import type cds from '@sap/cds'

/**
 * CAP internal: `cds.shutdown` disconnects every database service (`db.disconnect()`) at the same moment it emits
 * 'shutdown', destroying the connections running handlers still use. Replacing `disconnect` on the instance lets the
 * runner finish or hand back its messages first. Contract: test/cap-contract.test.js "disconnect".
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
