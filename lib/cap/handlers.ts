import type cds from '@sap/cds'

/**
 * CAP internal: a service lists its handlers in `srv.handlers.on` / `.after`, each entry naming its event. CAP's own
 * queue decides the same way whether anybody listens for a callback. Contract: test/cap-contract.test.js "handlers".
 */

interface HandlerEntry {
  on?: string
  after?: string
}

/** Whether handlers are registered for exactly `event`; CAP's `*` handlers never match `/#` events. */
export function hasHandlerFor(srv: cds.Service, event: string): boolean {
  const { on, after } = (srv as unknown as { handlers: { on: HandlerEntry[]; after: HandlerEntry[] } }).handlers
  return on.some(h => h.on === event) || after.some(h => h.after === event)
}
