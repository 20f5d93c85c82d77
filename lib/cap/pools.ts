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
 * validation drops a connection whose `open` is false. Contract: test/cap-contract.test.js "pools".
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
