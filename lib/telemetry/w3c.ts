import type { SpanContext } from '@opentelemetry/api'
import type { TraceContext } from '../interfaces'
import type { OpenTelemetry } from './otel'

/**
 * A span context as W3C Trace Context headers (https://www.w3.org/TR/trace-context/) and back. Written directly
 * rather than through the app's propagator: the stored form stays W3C's whatever propagators the app configured.
 */

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/

/** The trace context of a valid span context; undefined for an invalid one (no SDK, no span). */
export function traceContextOf(api: OpenTelemetry, span: SpanContext): TraceContext | undefined {
  if (!api.trace.isSpanContextValid(span)) return undefined
  const traceparent = `00-${span.traceId}-${span.spanId}-${(span.traceFlags & 0xff).toString(16).padStart(2, '0')}`
  const tracestate = span.traceState?.serialize()
  return tracestate ? { traceparent, tracestate } : { traceparent }
}

/** The remote span context a stored trace context names; undefined if it names none (unknown version, malformed). */
export function spanContextOf(api: OpenTelemetry, stored: TraceContext): SpanContext | undefined {
  const match = TRACEPARENT.exec(stored.traceparent)
  // version ff is invalid; version 00 has exactly four fields; later versions may append more, which are ignored
  if (!match || match[1] === 'ff' || (match[1] === '00' && match[5])) return undefined
  const span: SpanContext = {
    traceId: match[2],
    spanId: match[3],
    traceFlags: parseInt(match[4], 16),
    isRemote: true,
    traceState: stored.tracestate ? api.createTraceState(stored.tracestate) : undefined
  }
  return api.trace.isSpanContextValid(span) ? span : undefined
}
