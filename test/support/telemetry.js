const otel = require('@opentelemetry/api')
const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks')
const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } = require('@opentelemetry/sdk-trace-base')
const { MeterProvider, MetricReader } = require('@opentelemetry/sdk-metrics')

/**
 * What an app with an OpenTelemetry SDK has (@cap-js/telemetry registers the same at start), registered when a suite
 * requires this file: a context manager, a tracer provider exporting to memory (`spans`), and a meter provider read on
 * demand (`scrape()`), as a Prometheus scrape reads it.
 */
otel.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
const spans = new InMemorySpanExporter()
otel.trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }))

class ScrapeReader extends MetricReader {
  async onForceFlush() {}
  async onShutdown() {}
}
const reader = new ScrapeReader()
otel.metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }))

/** Every metric as of now. */
async function scrape() {
  const { resourceMetrics } = await reader.collect()
  return resourceMetrics.scopeMetrics.flatMap(scope => scope.metrics)
}

/** The data points of metric `name` whose attributes include `attributes`. */
function points(metrics, name, attributes) {
  const metric = metrics.find(m => m.descriptor.name === name)
  return (metric?.dataPoints ?? []).filter(p => Object.entries(attributes).every(([k, v]) => p.attributes[k] === v))
}

module.exports = { spans, scrape, points }
