import cds from '@sap/cds'

/**
 * CAP internals about services: `srv.isDatabaseService` marks database services also where `instanceof` fails (two
 * copies of @sap/cds; or of @cap-js/db-service, as with cds 10, @cap-js/sqlite 3 and @cap-js/postgres 2, which brings
 * db-service 2 of its own: its PostgresService is no `cds.DatabaseService` there); a service's `@requires` is read from its definition by the protocol adapters after `init()`,
 * so writing it there restricts the service exactly like a modelled `@requires`; CAP adds a method for each action of
 * an application service unless the service already has a method of that name, and skips one marked `_is_stub`.
 * Contract: test/cap/cap-contract.test.js "services".
 */

export function isDatabaseService(srv: cds.Service): srv is cds.DatabaseService {
  return !!(srv as unknown as { isDatabaseService?: boolean }).isDatabaseService || srv instanceof cds.DatabaseService
}

/** Restricts `srv` to `roles`, as `@requires` in its model would; call in `init()`, before the adapters read it. */
export function requireRoles(srv: cds.Service, roles: string[]): void {
  ;(srv as unknown as { definition: Record<string, unknown> }).definition['@requires'] = roles
}

/**
 * Lets a service class have an action named like a method of CAP's service API (CAP's recipe names a bound action
 * `delete`): the class gets that method, the inherited one unchanged, marked so that CAP neither wraps it as the
 * action's handler nor warns that the action shadows it.
 */
export function keepMethodBeside(proto: object, action: string): void {
  const inherited = (Object.getPrototypeOf(proto) as Record<string, (...args: unknown[]) => unknown>)[action]
  const method = function (this: unknown, ...args: unknown[]) {
    return inherited.apply(this, args)
  }
  Object.defineProperty(method, '_is_stub', { value: true })
  Object.defineProperty(proto, action, { value: method, configurable: true, writable: true })
}
