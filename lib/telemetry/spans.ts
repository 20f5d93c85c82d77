import type { Span, Tracer } from '@opentelemetry/api'
import type { TraceContext } from '../interfaces'
import { countConsumed, countSent, recordProcessDuration, type Failure } from './metrics'
import { ATTR, attributesOf, errorType, PROCESS, SCOPE, SEND } from './names'
import { openTelemetry, type OpenTelemetry } from './otel'
import { spanContextOf, traceContextOf } from './w3c'

/**
 * The trace across the queue: an enqueue runs in a PRODUCER span `send <queue>` whose trace context is stored with
 * the message; its handler runs in a CONSUMER span `process <queue>`, a child of that span, however much later and
 * in whichever process. So one trace shows the request, the enqueue, the handler and what the handler calls.
 */

function tracer(api: OpenTelemetry): Tracer {
  return api.trace.getTracer(SCOPE)
}

function failed(span: Span, api: OpenTelemetry, error: unknown): void {
  span.setAttribute(ATTR.errorType, errorType(error))
  if (error instanceof Error) span.recordException(error)
  span.setStatus({ code: api.SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) })
}

/**
 * Runs an enqueue in a PRODUCER span, a child of the caller's span, and counts the message as sent; `write` gets
 * the trace context to store with the message (undefined without tracing).
 */
export async function sending<T>(queue: string, tenant: string | undefined, write: (traceContext?: TraceContext) => Promise<T>): Promise<T> {
  const api = openTelemetry()
  if (!api) return write()
  const span = tracer(api).startSpan(`${SEND.name} ${queue}`, { kind: api.SpanKind.PRODUCER, attributes: attributesOf(queue, tenant, SEND) })
  let failure: Failure | undefined
  try {
    return await api.context.with(api.trace.setSpan(api.context.active(), span), () => write(traceContextOf(api, span.spanContext())))
  } catch (error) {
    failure = { error }
    failed(span, api, error)
    throw error
  } finally {
    countSent(queue, tenant, failure)
    span.end()
  }
}

/** What the process span of a message needs of it. */
export interface ProcessedMessage {
  ID: string
  tenant: string | undefined
  traceContext: TraceContext | undefined
}

/**
 * Runs one attempt of a message's handler in a CONSUMER span, counting it as consumed and how long it took. The
 * parent is the span that enqueued the message, never the active context: the runner's passes inherit whatever
 * context woke them, which has nothing to do with the message. A message without a stored trace (written by CAP's
 * queue, or without tracing) starts a trace of its own.
 */
export async function processing<T>(queue: string, message: ProcessedMessage, run: () => Promise<T>): Promise<T> {
  const api = openTelemetry()
  if (!api) return run()
  const enqueued = message.traceContext && spanContextOf(api, message.traceContext)
  const parent = enqueued ? api.trace.setSpanContext(api.ROOT_CONTEXT, enqueued) : api.ROOT_CONTEXT
  const attributes = { ...attributesOf(queue, message.tenant, PROCESS), [ATTR.messageId]: message.ID }
  const span = tracer(api).startSpan(`${PROCESS.name} ${queue}`, { kind: api.SpanKind.CONSUMER, attributes }, parent)
  countConsumed(queue, message.tenant)
  const started = performance.now()
  let failure: Failure | undefined
  try {
    return await api.context.with(api.trace.setSpan(parent, span), run)
  } catch (error) {
    failure = { error }
    failed(span, api, error)
    throw error
  } finally {
    recordProcessDuration(queue, message.tenant, (performance.now() - started) / 1000, failure)
    span.end()
  }
}

/** Runs `fn` outside any trace: work that is no part of the request that happened to start it. */
export function detached<T>(fn: () => T): T {
  const api = openTelemetry()
  return api ? api.context.with(api.ROOT_CONTEXT, fn) : fn()
}
