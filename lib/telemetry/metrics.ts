import type { Counter, Histogram, Meter, MeterProvider } from '@opentelemetry/api'
import { ATTR, attributesOf, errorType, METRIC, PROCESS, SCOPE, SEND } from './names'
import { openTelemetry } from './otel'

/**
 * The plugin's instruments on the app's current meter provider. The global meter provider has no proxy (a meter taken
 * before an SDK registers stays a no-op), so the provider is looked up on each use and the instruments are built
 * again when it changed.
 */

const VERSION = (require('../../package.json') as { version: string }).version

/** The bucket boundaries the messaging conventions recommend for their duration histograms, in seconds. */
const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10]

/** A failed operation: `error.type` names its error. */
export interface Failure {
  error: unknown
}

class Instruments {
  readonly sent: Counter
  readonly consumed: Counter
  readonly processDuration: Histogram

  constructor(meter: Meter) {
    this.sent = meter.createCounter(METRIC.sent, { description: 'Messages written to a queue (at enqueue, in the caller\'s transaction).', unit: '{message}' })
    this.consumed = meter.createCounter(METRIC.consumed, { description: 'Messages delivered to their handler (each attempt).', unit: '{message}' })
    this.processDuration = meter.createHistogram(METRIC.processDuration, {
      description: 'How long a handler took to process a message.',
      unit: 's',
      advice: { explicitBucketBoundaries: DURATION_BUCKETS }
    })
  }
}

let current: { provider: MeterProvider; instruments: Instruments } | undefined

function instruments(): Instruments | undefined {
  const api = openTelemetry()
  if (!api) return undefined
  const provider = api.metrics.getMeterProvider()
  if (current?.provider === provider) return current.instruments
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
