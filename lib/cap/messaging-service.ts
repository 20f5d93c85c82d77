import cds from '@sap/cds'

// A module of its own: reading `cds.MessagingService` loads CAP's runtime, which reads `cds.env`. Only the broker
// adapters (loaded by CAP as a service's impl, once the app's environment is known) may import it; the rest of the
// plugin is imported by tests and test helpers before cds.test() sets the app's root.

/** `cds.MessagingService` typed with what cds-types leaves out and CAP documents: `srv.options`, `srv.handle(msg)`. */
export const MessagingService = cds.MessagingService as unknown as new (name?: string, model?: unknown, options?: object) => cds.MessagingService & {
  options: Record<string, unknown>
  handle(msg: object): Promise<unknown>
}
