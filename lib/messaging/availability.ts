import { capBrokerAvailability, isCapBrokerUnavailable } from '../cap/broker-connections'
import type { BrokerAvailability } from '../interfaces'

/**
 * A broker that is away, told apart from a broker that refuses a message (docs/MESSAGING.md#when-the-broker-is-away): the first is no failure of the
 * message — its relay waits without an attempt charged (lib/runner/broker-waits.ts) —, the second is an attempt as
 * before. The one place that tells them apart, for every path that relays (one message, a batch, a pipeline).
 */

/** The broker of a messaging service cannot be reached now: not connected, reconnecting, authenticating, not answering. */
export class BrokerUnavailable extends Error {
  readonly code = 'BROKER_UNAVAILABLE'

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'BrokerUnavailable'
  }
}

/**
 * Whether a relay failed because its broker is unavailable, not because the broker refused the message: the plugin's
 * own kinds say so with `BrokerUnavailable`; of CAP's adapters, the errors they fail with while not connected
 * (lib/cap/broker-connections.ts).
 */
export function isBrokerUnavailable(error: unknown): boolean {
  return (error as { code?: unknown } | undefined)?.code === 'BROKER_UNAVAILABLE' || isCapBrokerUnavailable(error)
}

/** Sources of the plugin's own kinds, registered by the service (lib/messaging/redis-streams.ts). */
const registered = new WeakMap<object, BrokerAvailability>()

/** `srv` tells when its broker is available through `source` (the plugin's own messaging kinds). */
export function registerAvailability(srv: object, source: BrokerAvailability): void {
  registered.set(srv, source)
}

/**
 * How to learn that the broker of messaging service `srv` is back: its own source, or what CAP's adapter shows of
 * its connection; undefined where nothing does (a relay then probes, see lib/runner/broker-waits.ts).
 */
export function availabilityOf(srv: object): BrokerAvailability | undefined {
  return registered.get(srv) ?? capBrokerAvailability(srv)
}
