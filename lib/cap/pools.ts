import cds from '@sap/cds'
import { LOG } from '../log'

interface PooledConnection {
  open?: boolean
  on?(event: 'error', listener: (error: unknown) => void): unknown
}

interface PoolFactory {
  create(...args: unknown[]): Promise<PooledConnection>
}

/**
 * CAP internal: a database service creates pooled connections through `db.pools._factory.create`, and the pool's
 * validation drops a connection whose `open` is false; a transaction gets its connection from `this.acquire()` when it
 * begins and gives it back with `this.release()`; its pool (`tx.pool`, set when it begins) says its size in `max`.
 * Contract: test/cap-contract.test.js "pools".
 *
 * @cap-js/postgres (2.x) attaches no 'error' listener to its pooled connections: when the database restarts, every
 * idle connection emits an uncaught error and `cds serve` shuts the whole app down. A queue must ride out a database
 * outage, so each new pooled connection gets a listener that logs the failure and marks the connection closed; the
 * pool's validation (`open`) then replaces it on the next acquire. Drivers without events (SQLite) are left alone.
 */
export function survivePoolErrors(db: cds.DatabaseService): void {
  const factory = (db as unknown as { pools?: { _factory?: PoolFactory } }).pools?._factory
  if (!factory || typeof factory.create !== 'function') return
  const create = factory.create.bind(factory)
  factory.create = async (...args: unknown[]) => {
    const connection = await create(...args)
    connection.on?.('error', error => {
      connection.open = false
      LOG.warn('a pooled database connection failed; it is replaced on next use:', error)
    })
    return connection
  }
}

/** The transaction asking for a connection, and the original acquire. */
export type AcquireGuard = (tx: object, acquire: () => Promise<unknown>) => Promise<unknown>

/** Lets `guard` decide when a transaction of `db` gets its pooled connection. */
export function guardAcquire(db: cds.DatabaseService, guard: AcquireGuard): void {
  const service = db as unknown as { acquire(...args: unknown[]): Promise<unknown> }
  const acquire = service.acquire
  service.acquire = function (this: object, ...args: unknown[]) {
    return guard(this, () => acquire.apply(this, args))
  }
}

/** Gives a connection that the transaction `tx` acquired but does not use back to its pool. */
export function giveBack(tx: object, connection: unknown): void {
  void (tx as { pool: { release(c: unknown): Promise<unknown> } }).pool.release(connection)
}

/**
 * Whether the pool a transaction takes its connection from holds a single one (SQLite: generic-pool's default size,
 * which @cap-js/sqlite keeps): a transaction holding it blocks every other. Known once the transaction is beginning.
 */
export function hasSingleConnection(tx: object): boolean {
  const pool = (tx as { pool?: { max?: number; options?: { max?: number } } }).pool
  return (pool?.max ?? pool?.options?.max) === 1
}
