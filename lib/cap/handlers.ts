import type cds from '@sap/cds'

/**
 * CAP internal: a service lists its handlers in `srv.handlers.before` / `.on` / `.after`, each entry naming its event
 * and with a `for(req)` filter. CAP's own queue decides the same way whether anybody listens for a callback. CAP's
 * generic input processing (generated keys, defaults) runs after `srv.handle(req)` received a request, on cds 9 and
 * 10 (see `beforeInput`). Contract: test/cap/cap-contract.test.js "handlers", "handlers: input".
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

interface Phases {
  before: HandlerEntry[]
  on: HandlerEntry[]
  after: HandlerEntry[]
}

type Matching = HandlerEntry & { for(req: { event: string; path: string; entity: string }): boolean }

/**
 * Handlers that others (the app, plugins such as @cap-js/telemetry) register on a database service for writes of an
 * entity, besides the database service's own: the store writes through CAP while there are any, so they see every
 * enqueue as they see CAP's. A handler entry's `for(req)` tells whether it applies to a request (CAP's own test).
 */
export class Watchers {
  private readonly own: Set<HandlerEntry>
  private size = -1
  private watched = new Map<string, boolean>()

  /** Takes the handlers `db` has now as its own: call right after it connected. */
  constructor(private readonly db: cds.DatabaseService) {
    const { before, on, after } = this.phases
    this.own = new Set([...before, ...on, ...after])
  }

  private get phases(): Phases {
    return (this.db as unknown as { handlers: Phases }).handlers
  }

  /** Whether handlers other than the database service's own apply to `event` on `entity`. */
  watch(event: 'CREATE' | 'UPSERT', entity: string): boolean {
    const { before, after } = this.phases
    if (before.length + after.length !== this.size) {
      this.size = before.length + after.length
      this.watched.clear()
    }
    const key = `${event} ${entity}`
    let watched = this.watched.get(key)
    if (watched === undefined) {
      const req = { event, path: entity, entity }
      watched = [...before, ...after].some(h => !this.own.has(h) && (h as Matching).for(req))
      this.watched.set(key, watched)
    }
    return watched
  }
}

/**
 * Lets `handler` see every request of `srv` as the client sent it, before CAP's generic input processing fills in
 * generated keys and defaults: cds 9 runs that processing as an `_initial` handler, cds 10 in
 * `ApplicationService.handle` ahead of all handlers, and both receive the request through `srv.handle(req)`, which
 * is wrapped here on the instance (a service's transactions inherit it).
 */
export function beforeInput(srv: cds.Service, handler: (req: cds.Request) => void): void {
  const service = srv as unknown as { handle(req: cds.Request): Promise<unknown> }
  const handle = service.handle
  service.handle = function (this: unknown, req: cds.Request) {
    handler(req)
    return handle.call(this, req)
  }
}
