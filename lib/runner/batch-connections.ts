import { AsyncLocalStorage } from 'async_hooks'
import type cds from '@sap/cds'
import { giveBack, guardAcquire, hasSingleConnection } from '../cap/pools'
import type { DatabaseTransaction } from '../store'

/**
 * A batch holds its database's connection from the first statement of one of its messages to its commit. Where the
 * pool has a single connection (SQLite), a handler that awaits a transaction of its own (`cds.tx`, a spawned one it
 * waits for) would wait for that connection forever. Such a request is noticed when it has waited `WAIT` ms while its
 * message still runs: it fails (its transaction never began, so nothing of it happened), the batch gives that message
 * up, and the message runs again alone, where it works as it does under CAP's own queue. A spawned transaction the
 * handler does not wait for just waits for the batch's commit.
 */

const WAIT = 100

/** The message of a batch running in the current async context. */
export interface BatchMessage {
  /** The batch's transaction, which may hold the connection. */
  readonly shared: DatabaseTransaction
  running: boolean
  /** Its handler asked for a connection of its own that the batch holds: the batch must give the message up. */
  conflict: boolean
}

const current = new AsyncLocalStorage<BatchMessage>()

/** Runs `fn` as the batch message `message`. */
export function asBatchMessage<T>(message: BatchMessage, fn: () => Promise<T>): Promise<T> {
  return current.run(message, fn)
}

export class ConnectionHeldByBatch extends Error {
  readonly code = 'CONNECTION_HELD_BY_BATCH'
  constructor() {
    super("A transaction of the handler's own waits for the database connection its batch holds; the message runs again alone")
    this.name = 'ConnectionHeldByBatch'
  }
}

/** Watches the transactions of `db` that batch messages open (where the pool has a single connection). */
export function watchBatchConnections(db: cds.DatabaseService): void {
  guardAcquire(db, async (tx, acquire) => {
    const message = current.getStore()
    if (!message || tx === message.shared || !message.shared.dbc || !hasSingleConnection(tx)) return acquire()
    const pending = acquire()
    const waited = await Promise.race([pending, new Promise(resolve => setTimeout(() => resolve(WAITED), WAIT))])
    if (waited !== WAITED || !message.running) return waited === WAITED ? pending : waited
    message.conflict = true
    void pending.then(connection => giveBack(tx, connection), () => undefined)
    throw new ConnectionHeldByBatch()
  })
}

const WAITED = Symbol('waited')
