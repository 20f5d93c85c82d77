import cds from '@sap/cds'
import { AsyncLocalStorage } from 'async_hooks'
import { LOG } from '../log'
import { postgresClient } from './drivers'

interface PooledConnection {
  open?: boolean
  on?(event: 'error', listener: (error: unknown) => void): unknown
  end?(): Promise<unknown>
}

interface PoolFactory {
  create(...args: unknown[]): Promise<PooledConnection>
}

type Connect = (this: PooledConnection, ...args: unknown[]) => Promise<unknown>

/** Gives the connection whose `connect` is called while a pooled connection is created its 'error' listener. */
const creating = new AsyncLocalStorage<(connection: PooledConnection) => void>()

/**
 * CAP internal: a database service creates pooled connections through `db.pools._factory.create`, and the pool's
 * validation drops a connection whose `open` is false; a transaction gets its connection from `this.acquire()` when it
 * begins and gives it back with `this.release()`; its pool (`tx.pool`, set when it begins) says its size in `max`.
 * @cap-js/postgres creates a `pg` Client (its own dependency) in `create` and awaits its `connect()` there.
 * Contract: test/cap/cap-contract.test.js "pools".
 *
 * @cap-js/postgres (2.x) attaches no 'error' listener to its pooled connections: when the database restarts, every
 * idle connection emits an uncaught error and `cds serve` shuts the whole app down. A queue must ride out a database
 * outage, so each new pooled connection gets a listener that logs the failure and marks the connection closed; the
 * pool's validation (`open`) then replaces it on the next acquire. Drivers without events (SQLite) are left alone.
 *
 * The listener must be there before `connect()` resolves: pg reads the server's messages a chunk at a time, and a
 * restart can end a session right after its handshake, its "ready" and its FATAL 57P01 in one chunk. pg then resolves
 * `connect()` and emits the error in the same tick, before the factory's `create` returns the connection. Such a
 * connection fails its `create` (the pool's acquire fails or the pool tries another), with one warning.
 */
export function survivePoolErrors(db: cds.DatabaseService): void {
  const factory = (db as unknown as { pools?: { _factory?: PoolFactory } }).pools?._factory
  if (!factory || typeof factory.create !== 'function') return
  if ((db as unknown as { kind?: string }).kind === 'postgres') listenFromConnect()
  const create = factory.create.bind(factory)
  factory.create = async (...args: unknown[]) => {
    let listening = false
    let created = false
    let failure: { error: unknown } | undefined
    const listen = (connection: PooledConnection) => {
      if (listening) return
      listening = true
      connection.on?.('error', error => {
        connection.open = false
        if (created) LOG.warn('a pooled database connection failed; it is replaced on next use:', error)
        else failure ??= { error }
      })
    }
    const connection = await creating.run(listen, () => create(...args))
    created = true
    listen(connection)
    if (failure) {
      LOG.warn('a database connection failed while the pool opened it; its acquire fails:', failure.error)
      void connection.end?.().catch(() => undefined)
      throw failure.error
    }
    return connection
  }
}

/**
 * The reason the pool of `db` last failed to open a connection, for as long as it fails: a pool that cannot connect
 * fails an acquire with generic-pool's "ResourceRequest timed out" only, naming neither the host nor why.
 */
export function connectionFailures(db: cds.DatabaseService): () => unknown {
  const factory = (db as unknown as { pools?: { _factory?: PoolFactory } }).pools?._factory
  if (!factory || typeof factory.create !== 'function') return () => undefined
  let failure: unknown
  const create = factory.create.bind(factory)
  factory.create = async (...args: unknown[]) => {
    try {
      const connection = await create(...args)
      failure = undefined
      return connection
    } catch (e) {
      failure = e
      throw e
    }
  }
  return () => failure
}

let connectHooked = false

/** `pg`'s `Client#connect`, as @cap-js/postgres resolves it, calls the listener of the creation it runs in first. */
function listenFromConnect(): void {
  if (connectHooked) return
  connectHooked = true
  const Client = postgresClient<{ prototype: { connect: Connect } }>()
  const connect = Client.prototype.connect
  Client.prototype.connect = function (this: PooledConnection, ...args: unknown[]) {
    creating.getStore()?.(this)
    return connect.apply(this, args)
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
