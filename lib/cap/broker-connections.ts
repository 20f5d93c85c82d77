import type { BrokerAvailability } from '../interfaces'

/**
 * What CAP's messaging adapters (@sap/cds libx/_runtime/messaging) show of their broker connection, undocumented: the
 * errors a relay fails with while the adapter is not connected, and where the connection's state can be read. Per
 * kind, as read in CAP 9.9's source:
 * - `redis-messaging` (redis-messaging.js): a message marked `_fromOutbox` fails with `Error('Redis connection not
 *   ready')` while CAP's `_ready` flag is down (set by its client's 'error'/'end', raised by 'ready'); a publish whose
 *   connection drops fails with node-redis's connection errors (below). State: `srv.client.isReady` and `srv._ready`,
 *   and the client's 'ready' event. A frozen Redis (no answer, socket open) is not told: the publish waits, up to
 *   the queue's `handlerTimeout`.
 * - `enterprise-messaging-shared` / `enterprise-messaging-amqp` (common-utils/AMQPClient.js): `Error('AMQP: Sender is
 *   not open')` for a message marked `_fromOutbox` while its sender is not open; `Error('Connection error')` when it
 *   has to connect first and cannot (common-utils/connections.js). State: `srv.client.sender.opened()`, read by
 *   polling (the client's events are re-registered by CAP on every reconnect).
 * - `enterprise-messaging` / `enterprise-messaging-http` (enterprise-messaging.js, common-utils/authorizedRequest.js):
 *   a failed REST call rejects with `{ body, headers, statusCode }`, its token request with `Error('Authorization
 *   failed')` and `response.statusCode`; a 502, 503 or 504 is the service being away. No connection state: a relay
 *   probes (lib/runner/broker-waits.ts). A network error of its HTTPS request has no listener in CAP and is not seen here.
 * - `file-based-messaging` (file-based.js): nothing; an append fails for the file's own reasons (space, rights).
 * - `kafka` (kafka.js): nothing; kafkajs retries by itself before an attempt fails.
 * Node's network error codes on a relay's error (or its `cause`) say the same for any adapter. Where nothing is told
 * apart, the messaging service's circuit breaker holds its relays back without charging them (broker-waits.ts).
 * Contract: test/cap/cap-contract.test.js "broker connections".
 */

const NOT_CONNECTED = new Set([
  'Redis connection not ready',
  'AMQP: Sender is not open',
  'Connection error',
  // node-redis (CAP's redis-messaging client): a command whose connection is gone or not there
  'Socket closed unexpectedly',
  'The client is closed',
  'The client is offline',
  'Disconnects client',
  'Connection timeout'
])

/** HTTP statuses of a service that is away (a gateway without it, overloaded, or not answering in time). */
const AWAY_STATUSES = new Set([502, 503, 504])

/** Node's codes of a connection that could not be made or was lost. */
const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'EPIPE', 'ECONNABORTED'])

type Failure = { message?: unknown; code?: unknown; statusCode?: unknown; response?: { statusCode?: unknown }; cause?: Failure }

/** Whether a relay through one of CAP's adapters failed because it is not connected to its broker (see above). */
export function isCapBrokerUnavailable(error: unknown): boolean {
  if (!error || typeof error !== 'object') return false
  const e = error as Failure
  if (error instanceof Error && NOT_CONNECTED.has(error.message)) return true
  if (AWAY_STATUSES.has(Number(e.statusCode ?? e.response?.statusCode))) return true
  return NETWORK_CODES.has(String(e.code)) || NETWORK_CODES.has(String(e.cause?.code))
}

interface RedisAdapter {
  _ready?: boolean
  client?: { isReady?: boolean; on?(event: 'ready', listener: () => void): unknown; off?(event: 'ready', listener: () => void): unknown }
}
interface AmqpAdapter {
  client?: { sender?: { opened?(): boolean } }
}

/** How often an AMQP adapter's sender is looked at while a relay waits for it. */
const POLL_INTERVAL = 500

/** What CAP's adapter of `srv` shows of its connection (see above); undefined for adapters that show nothing. */
export function capBrokerAvailability(srv: object): BrokerAvailability | undefined {
  const redis = srv as RedisAdapter
  const client = redis.client
  if (client && typeof client.isReady === 'boolean' && typeof client.on === 'function') {
    return {
      get available() {
        return client.isReady === true && redis._ready !== false
      },
      onAvailable(listener) {
        // CAP's own 'ready' listener, registered first, has raised `_ready` by then
        client.on!('ready', listener)
        return () => client.off?.('ready', listener)
      }
    }
  }
  const sender = () => (srv as AmqpAdapter).client?.sender
  if (typeof sender()?.opened === 'function') {
    const available = () => sender()?.opened?.() === true
    return {
      get available() {
        return available()
      },
      onAvailable(listener) {
        let was = available()
        const timer = setInterval(() => {
          const now = available()
          if (now && !was) listener()
          was = now
        }, POLL_INTERVAL).unref()
        return () => clearInterval(timer)
      }
    }
  }
  return undefined
}
