import type cds from '@sap/cds'
import { Writable } from 'stream'
import { postgresClient } from './drivers'

/**
 * CAP internal: @cap-js/postgres (2.3) sends a statement's stream parameters, among them the JSON of every CQL
 * INSERT's entries, through a `ParameterStream`: a Writable it submits to its `pg` Client's `query`, which answers
 * the server's COPY by writing each chunk to `this.connection.stream`. When the session ends while chunks wait (a
 * restart or failover right as the COPY begins), pg's `handleError` sets `connection` to null and the next chunk is
 * written to null: a TypeError thrown from a stream callback, outside any promise, which ends `cds serve`. The plugin
 * runs the app's handlers during outages, so each such stream here fails its writes once its connection is gone
 * instead: the statement rejects with the server's error (which pg's handleError emitted), nothing is thrown.
 * Contract: test/cap/cap-contract.test.js "parameter streams" (also tells when @cap-js/postgres handles it itself).
 */

type Callback = (error?: Error | null) => void

interface ParameterStream {
  connection: unknown
  flush(chunk: unknown, callback: Callback): void
  _destroy(error: Error | null, callback: Callback): void
}

interface PgClientClass {
  prototype: { query(this: unknown, config: unknown, ...args: unknown[]): unknown }
}

let watched = false

/** Guards the ParameterStreams of @cap-js/postgres's `pg`, from the first one a client is given on. */
export function surviveEndedCopies(db: cds.DatabaseService): void {
  if ((db as unknown as { kind?: string }).kind !== 'postgres' || watched) return
  watched = true
  const Client = postgresClient<PgClientClass>()
  const query = Client.prototype.query
  // The class is not exported: it is found on its first instance, and the client's query is then given back.
  Client.prototype.query = function (this: unknown, config: unknown, ...args: unknown[]) {
    if (isParameterStream(config)) {
      guard(Object.getPrototypeOf(config) as ParameterStream)
      Client.prototype.query = query
    }
    return query.call(this, config, ...args)
  }
}

function isParameterStream(config: unknown): config is ParameterStream {
  return config instanceof Writable && config.constructor.name === 'ParameterStream' && 'flush' in config
}

function connectionEnded(): Error {
  return new Error('the database connection ended while a statement sent its stream parameters (COPY)')
}

function guard(stream: ParameterStream): void {
  const { flush, _destroy: destroy } = stream
  // every chunk and the COPY's end pass through flush; its callback may run after the connection went (_final then
  // writes to it)
  stream.flush = function (this: ParameterStream, chunk, callback) {
    if (!this.connection) return callback(connectionEnded())
    flush.call(this, chunk, error => callback(error ?? (this.connection ? undefined : connectionEnded())))
  }
  // destroying tells the server the COPY failed, on the connection
  stream._destroy = function (this: ParameterStream, error, callback) {
    if (!this.connection) return callback(error)
    destroy.call(this, error, callback)
  }
}
