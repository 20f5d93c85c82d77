import type { BatchObservableResult, Counter, Histogram, Meter, MeterProvider, ObservableGauge } from '@opentelemetry/api'
import type { BrokerWait, QueueSnapshot } from '../interfaces'
import { ATTR, attributesOf, errorType, METRIC, MESSAGING_SYSTEM, PROCESS, SCOPE, SEND } from './names'
import { openTelemetry } from './otel'

/**
 * The plugin's instruments on the app's current meter provider. The global meter provider has no proxy (a meter taken
 * before an SDK registers stays a no-op), so the provider is looked up on each use and the instruments are built
 * again when it changed.
 */

const VERSION = (require('../../package.json') as { version: string }).version

/** The bucket boundaries the messaging conventions recommend for their duration histograms, in seconds. */
const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10]

/** The queue statistics the gauges report: one entry per tenant this process serves (`tenant` undefined: no tenants). */
export type QueueObservations = () => Promise<{ tenant: string | undefined; queues: QueueSnapshot[] }[]>

/** Every state of a circuit breaker: its gauge reports each, 1 for the current one (a state set). */
const BREAKER_STATES = ['closed', 'open', 'probing'] as const

/** A failed operation: `error.type` names its error. */
export interface Failure {
  error: unknown
}

let observations: QueueObservations | undefined
/** The relay's waits for brokers in this process (lib/runner/broker-waits.ts). */
let waits: (() => BrokerWait[]) | undefined

class Instruments {
  readonly sent: Counter
  readonly consumed: Counter
  readonly processDuration: Histogram
  readonly deleted: Counter
  readonly duplicates: Counter
  readonly refused: Counter
  readonly dropped: Counter
  private readonly messages: ObservableGauge
  private readonly relayLag: ObservableGauge
  private readonly paused: ObservableGauge
  private readonly breaker: ObservableGauge
  private readonly brokerWaiting: ObservableGauge
  private readonly brokerWaitingFor: ObservableGauge

  constructor(private readonly meter: Meter) {
    this.sent = meter.createCounter(METRIC.sent, { description: 'Messages written to a queue (at enqueue, in the caller\'s transaction).', unit: '{message}' })
    this.consumed = meter.createCounter(METRIC.consumed, { description: 'Messages delivered to their handler (each attempt).', unit: '{message}' })
    this.processDuration = meter.createHistogram(METRIC.processDuration, {
      description: 'How long a handler took to process a message.',
      unit: 's',
      advice: { explicitBucketBoundaries: DURATION_BUCKETS }
    })
    this.deleted = meter.createCounter(METRIC.deleted, { description: 'Dead letters deleted after their queue\'s deadLetterRetention.', unit: '{message}' })
    this.duplicates = meter.createCounter(METRIC.duplicates, { description: 'Redeliveries an inbox dropped and repeated requests an idempotent operation answered from its record.', unit: '{message}' })
    this.refused = meter.createCounter(METRIC.refused, { description: 'Inbound messages an inbox refused (too large, an invalid ordering key): kept as dead letters.', unit: '{message}' })
    this.dropped = meter.createCounter(METRIC.dropped, { description: 'Inbound messages of a tenant that is not subscribed: acknowledged without being handled.', unit: '{message}' })
    this.messages = meter.createObservableGauge(METRIC.messages, { description: 'Messages of a queue by state (pending, processing, dead), as of the last statistics query.', unit: '{message}' })
    this.relayLag = meter.createObservableGauge(METRIC.relayLag, { description: 'How long the oldest due message of a queue has been waiting, as of the last statistics query.', unit: 's' })
    this.paused = meter.createObservableGauge(METRIC.paused, { description: 'Whether an operator paused the queue (1) or not (0), as of the last statistics query.', unit: '1' })
    this.breaker = meter.createObservableGauge(METRIC.breaker, { description: 'The state of the queue\'s circuit breaker: 1 for the state it is in, 0 for the others, as of the last statistics query.', unit: '1' })
    this.brokerWaiting = meter.createObservableGauge(METRIC.brokerWaiting, { description: 'Events of a messaging service waiting for its broker in this process (none while it is available), as of the last count.', unit: '{message}' })
    this.brokerWaitingFor = meter.createObservableGauge(METRIC.brokerWaitingFor, { description: 'How long a messaging service\'s events have been waiting for its broker in this process.', unit: 's' })
    meter.addBatchObservableCallback(this.observe, this.gauges)
  }

  private get gauges(): ObservableGauge[] {
    return [this.messages, this.relayLag, this.paused, this.breaker, this.brokerWaiting, this.brokerWaitingFor]
  }

  /** No more observations on this provider's meter: the app registered another one. */
  close(): void {
    this.meter.removeBatchObservableCallback(this.observe, this.gauges)
  }

  private readonly observe = async (result: BatchObservableResult): Promise<void> => {
    for (const wait of waits?.() ?? []) {
      const attributes = { [ATTR.system]: MESSAGING_SYSTEM, [ATTR.service]: wait.service }
      result.observe(this.brokerWaitingFor, Math.max(0, Math.floor((Date.now() - wait.since) / 1000)), attributes)
      if (wait.events !== undefined) result.observe(this.brokerWaiting, wait.events, attributes)
    }
    if (!observations) return
    let tenants: Awaited<ReturnType<QueueObservations>>
    try {
      tenants = await observations()
    } catch {
      return // the statistics log their failure; a scrape without queue gauges says the same
    }
    for (const { tenant, queues } of tenants) {
      for (const q of queues) {
        const attributes = attributesOf(q.queue, tenant)
        result.observe(this.messages, q.pending, { ...attributes, [ATTR.state]: 'pending' })
        result.observe(this.messages, q.processing, { ...attributes, [ATTR.state]: 'processing' })
        result.observe(this.messages, q.dead, { ...attributes, [ATTR.state]: 'dead' })
        result.observe(this.relayLag, q.relayLag, attributes)
        result.observe(this.paused, q.paused ? 1 : 0, attributes)
        const breaker = q.breaker
        if (breaker) for (const state of BREAKER_STATES) result.observe(this.breaker, state === breaker ? 1 : 0, { ...attributes, [ATTR.breakerState]: state })
      }
    }
  }
}

let current: { provider: MeterProvider; instruments: Instruments } | undefined

function instruments(): Instruments | undefined {
  const api = openTelemetry()
  if (!api) return undefined
  const provider = api.metrics.getMeterProvider()
  if (current?.provider === provider) return current.instruments
  current?.instruments.close()
  current = { provider, instruments: new Instruments(provider.getMeter(SCOPE, VERSION)) }
  return current.instruments
}

function withError(attributes: Record<string, string>, failure: Failure | undefined): Record<string, string> {
  return failure ? { ...attributes, [ATTR.errorType]: errorType(failure.error) } : attributes
}

export function countSent(queue: string, tenant: string | undefined, failure?: Failure): void {
  instruments()?.sent.add(1, withError(attributesOf(queue, tenant, SEND), failure))
}

export function countConsumed(queue: string, tenant: string | undefined): void {
  instruments()?.consumed.add(1, attributesOf(queue, tenant, PROCESS))
}

export function recordProcessDuration(queue: string, tenant: string | undefined, seconds: number, failure?: Failure): void {
  instruments()?.processDuration.record(seconds, withError(attributesOf(queue, tenant, PROCESS), failure))
}

export function countDeletedDeadLetters(queue: string, tenant: string | undefined, count: number): void {
  instruments()?.deleted.add(count, attributesOf(queue, tenant))
}

/** A duplicate a receiver recognised: `receiver` is its receipts' scope (`inbox:<service>`, `action:<operation>`). */
export function countDuplicate(receiver: string, tenant: string | undefined): void {
  instruments()?.duplicates.add(1, receiverAttributes(receiver, tenant))
}

function receiverAttributes(receiver: string, tenant: string | undefined): Record<string, string> {
  const attributes: Record<string, string> = { [ATTR.system]: MESSAGING_SYSTEM, [ATTR.receiver]: receiver }
  if (tenant) attributes[ATTR.tenant] = tenant
  return attributes
}

/** An inbound message the inbox of `receiver` (its messaging service) refused and kept as a dead letter. */
export function countRefused(receiver: string, tenant: string | undefined, failure: Failure): void {
  instruments()?.refused.add(1, withError(receiverAttributes(receiver, tenant), failure))
}

/** An inbound message `receiver` (its messaging service) dropped: its tenant is not subscribed. */
export function countDropped(receiver: string, tenant: string | undefined): void {
  instruments()?.dropped.add(1, receiverAttributes(receiver, tenant))
}

/**
 * Reports the queue gauges from `source`, and the relay's waits for brokers from `brokerWaits`, from now on;
 * undefined stops them (the process shuts down).
 */
export function observeQueues(source: QueueObservations | undefined, brokerWaits?: () => BrokerWait[]): void {
  observations = source
  waits = brokerWaits
  instruments()
}
