import cds from '@sap/cds'
import { isOutboundMessage } from '../cap/messaging'
import type { DecodedMessage } from '../codec'
import { errorLine, isProgrammingError, isUnrecoverable } from '../failures'
import type { BrokerAvailability, BrokerWait, Outcome } from '../interfaces'
import { availabilityOf, BrokerUnavailable, isBrokerUnavailable } from '../messaging/availability'
import { LOG } from '../log'
import { clock } from '../time/clock'

/**
 * The relay's wait for a messaging service's broker (docs/MESSAGING.md#when-the-broker-is-away), per service and per process (each process has its
 * own connections): while the broker is away, the service's queued events stay in the table without an attempt
 * charged, claims skip them (other services of the same queue go on), and once the broker is back they relay in
 * order, each key's in enqueue order. One warning when the wait begins, one info line when it ends, with how many
 * events waited; none per message.
 *
 * A wait begins when a relay fails with an error that says the broker is away (lib/messaging/availability.ts), and
 * ends when the broker is available again: at once where the service tells it (redis-streams: its connection is
 * ready or answers again; CAP's Redis and AMQP adapters: their client's state), else when a probe succeeds — one
 * message of the service every `PROBE_INTERVAL`, whose failure charges nothing. Where errors cannot be told apart,
 * the service's circuit breaker begins a wait after `BREAKER.failures` consecutive failed relays (charged: the broker
 * may have refused each message); while it holds, nothing is charged, a message probes every `BREAKER.probeInterval`,
 * and a failed probe goes behind the others, so that one message the broker always refuses does not delay the rest.
 */

/** How often a message probes a broker that is away when its service does not tell when it is back. */
const PROBE_INTERVAL = 1000
/** A messaging service's default circuit breaker, for relay failures that do not say whether the broker is away. */
const BREAKER = { failures: 5, probeInterval: 30_000 }
/** How often the count of a wait's events is read again while it lasts (for health and metrics). */
const COUNT_INTERVAL = 30_000

/** What the waits need of the runner. */
export interface BrokerWaitsHost {
  /** Claims again soon, in every tenant: a broker is back, or a probe is due. */
  wake(): void
  /** How many messages of `service` wait (no dead letters, claimed ones too), in every tenant this process serves. */
  pending(service: string): Promise<number>
  /** The broker of `service` is back: its rows' waiting marks are cleared; resolves with how many messages wait. */
  ended(service: string): Promise<number>
}

interface Wait extends BrokerWait {
  source: BrokerAvailability | undefined
  stop: (() => void) | undefined
  probeAt: number
  probing: boolean
  counter: NodeJS.Timeout | undefined
  waker: NodeJS.Timeout | undefined
}

/** The service of an outbound message of a messaging service (a relay), served in this process; else undefined. */
function relayedBy(message: DecodedMessage | undefined): { name: string; srv: cds.Service } | undefined {
  if (!message) return undefined
  const served = cds.services[message.serviceName] as cds.Service | undefined
  const srv = served && (cds.unqueued(served) as cds.Service)
  return srv && isOutboundMessage(srv, message.request) ? { name: message.serviceName, srv } : undefined
}

export class BrokerWaits {
  private readonly waits = new Map<string, Wait>()
  /** Consecutive relays of each service that failed without saying why (for its circuit breaker). */
  private readonly failures = new Map<string, number>()
  private host: BrokerWaitsHost | undefined

  /** The runner that claims: woken when a broker is back. */
  attach(host: BrokerWaitsHost): void {
    this.host = host
  }

  /** The waits of this process now. */
  get current(): BrokerWait[] {
    return [...this.waits.values()].map(({ service, since, events, reason, suspected }) => ({ service, since, events, reason, suspected }))
  }

  /** Whether this process waits for the broker of `service`. */
  waiting(service: string | undefined): boolean {
    return service !== undefined && this.waits.has(service)
  }

  /** The services whose relays claims leave in the table now: those waited for, but for one whose probe is due. */
  skipped(now = clock.now()): string[] {
    return [...this.waits.values()].filter(w => w.source || w.probing || now < w.probeAt).map(w => w.service)
  }

  /**
   * Throws BrokerUnavailable for a relay that must not start: its broker is waited for, and it is not the probe.
   * Called right before a message's handlers run; anything else passes.
   */
  admit(message: DecodedMessage): void {
    const wait = this.waits.get(message.serviceName)
    if (!wait || !relayedBy(message)) return
    if (!wait.source && !wait.probing && clock.now() >= wait.probeAt) {
      wait.probing = true
      return
    }
    throw new BrokerUnavailable(`${wait.service}: waiting for the broker since ${new Date(wait.since).toISOString()}`)
  }

  /**
   * What an attempt of `message` comes to, with the waits: a relay that failed because its broker is away, or while
   * its breaker holds, waits (no attempt charged); the outcome of a probe ends or continues its wait; anything else
   * is as the attempt came out.
   */
  judge(outcome: Outcome, message: DecodedMessage | undefined): Outcome {
    const relay = relayedBy(message)
    if (!relay) return outcome
    const service = relay.name
    const wait = this.waits.get(service)
    if (outcome.kind === 'succeeded') {
      this.failures.delete(service)
      // a relay the broker accepted before the wait began says nothing of it since (one of a batch answered before
      // the broker went away, settled with its batch after another slot's relay found it away)
      if (wait && !(outcome.answeredAt! < wait.since)) this.end(wait)
      return outcome
    }
    if (outcome.kind !== 'retry' && outcome.kind !== 'dead') {
      if (wait?.probing) this.probed(wait)
      return outcome
    }
    const { error } = outcome
    if (isProgrammingError(error) || isUnrecoverable(error) || (outcome.kind === 'dead' && outcome.silent)) return outcome
    if (isBrokerUnavailable(error)) return this.waited(wait ?? this.begin(relay, error, false), error, false)
    // its breaker holds: nothing is charged, and a failed probe goes behind the service's other events
    if (wait) return this.waited(wait, error, true)
    const failures = (this.failures.get(service) ?? 0) + 1
    this.failures.set(service, failures)
    if (failures >= BREAKER.failures) this.begin(relay, error, true)
    return outcome
  }

  /** Stops every wait (the runner stops): no more timers or listeners. */
  stop(): void {
    for (const wait of this.waits.values()) this.release(wait)
    this.waits.clear()
    this.failures.clear()
  }

  private waited(wait: Wait, error: unknown, behind: boolean): Outcome {
    const now = clock.now()
    const probe = wait.probing
    if (probe) this.probed(wait)
    const dueAt = new Date(behind && probe ? now + BREAKER.probeInterval : now)
    return { kind: 'waiting', service: wait.service, error, since: wait.since, dueAt }
  }

  /** A probe ended without saying the broker is back: the next one after the interval. */
  private probed(wait: Wait): void {
    wait.probing = false
    wait.probeAt = clock.now() + (wait.suspected ? BREAKER.probeInterval : PROBE_INTERVAL)
    this.wakeAt(wait)
  }

  private begin({ name, srv }: { name: string; srv: cds.Service }, error: unknown, suspected: boolean): Wait {
    const now = clock.now()
    const source = suspected ? undefined : availabilityOf(srv)
    const wait: Wait = {
      service: name, since: now, events: undefined, reason: errorLine(error), suspected,
      source, stop: undefined, probing: false, probeAt: now + (suspected ? BREAKER.probeInterval : PROBE_INTERVAL), counter: undefined, waker: undefined
    }
    this.waits.set(name, wait)
    this.failures.delete(name)
    const until = source ? 'until it is back' : `probing with one event every ${(suspected ? BREAKER.probeInterval : PROBE_INTERVAL) / 1000} s`
    const why = suspected ? `${BREAKER.failures} consecutive relays failed (its circuit breaker)` : wait.reason
    LOG.warn(`${name}: waiting for the broker since ${new Date(now).toISOString()}: ${why}. Its events wait in the queue without attempts charged, ${until}`)
    if (source) {
      wait.stop = source.onAvailable(() => this.end(wait))
      // back between the failure and now: the 'ready' is gone by
      if (source.available) queueMicrotask(() => this.end(wait))
    } else this.wakeAt(wait)
    this.count(wait)
    wait.counter = setInterval(() => this.count(wait), COUNT_INTERVAL).unref()
    return wait
  }

  private end(wait: Wait): void {
    if (this.waits.get(wait.service) !== wait) return
    this.waits.delete(wait.service)
    this.release(wait)
    this.host?.wake()
    const lasted = clock.now() - wait.since
    const line = (events: string) => LOG.info(`${wait.service}: the broker is back after ${lasted} ms; ${events} events waited and relay now`)
    const host = this.host
    if (!host) return line('the')
    host.ended(wait.service).then(n => line(String(n)), e => {
      line('the')
      LOG.warn(`${wait.service}: could not clear the waiting marks of its events (they are cleared when they relay):`, e)
    })
  }

  private release(wait: Wait): void {
    wait.stop?.()
    clearInterval(wait.counter)
    clearTimeout(wait.waker)
  }

  /** Wakes the runner when the wait's next probe is due (claims then take a message of its service). */
  private wakeAt(wait: Wait): void {
    clearTimeout(wait.waker)
    wait.waker = setTimeout(() => this.host?.wake(), Math.max(0, wait.probeAt - clock.now())).unref()
  }

  private count(wait: Wait): void {
    this.host?.pending(wait.service).then(n => (wait.events = n), () => undefined)
  }
}

/** The process's waits: its connections to brokers are the process's, whatever runner or tenant relays through them. */
export const brokerWaits = new BrokerWaits()
