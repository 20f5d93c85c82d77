import cds from '@sap/cds'
import type * as Api from '@opentelemetry/api'

/**
 * The app's `@opentelemetry/api`, an optional peer dependency: resolved from the app (where its SDK, e.g.
 * @cap-js/telemetry, registers the providers), else beside the plugin. Without it the plugin measures nothing and
 * traces nothing: every function of lib/telemetry then only runs what it wraps.
 */
export type OpenTelemetry = typeof Api

let resolved: OpenTelemetry | null | undefined

export function openTelemetry(): OpenTelemetry | undefined {
  if (resolved === undefined) resolved = load()
  return resolved ?? undefined
}

function load(): OpenTelemetry | null {
  try {
    return require(require.resolve('@opentelemetry/api', { paths: [cds.root, __dirname] })) as OpenTelemetry
  } catch {
    return null
  }
}
