import cds from '@sap/cds'

/**
 * CAP internals about services: `srv.isDatabaseService` marks database services also where `instanceof` fails (two
 * copies of @sap/cds), and a service's `@requires` is read from its definition by the protocol adapters after
 * `init()`, so writing it there restricts the service exactly like a modelled `@requires`.
 * Contract: test/cap-contract.test.js "services".
 */

export function isDatabaseService(srv: cds.Service): boolean {
  return !!(srv as unknown as { isDatabaseService?: boolean }).isDatabaseService || srv instanceof cds.DatabaseService
}

/** Restricts `srv` to `roles`, as `@requires` in its model would; call in `init()`, before the adapters read it. */
export function requireRoles(srv: cds.Service, roles: string[]): void {
  ;(srv as unknown as { definition: Record<string, unknown> }).definition['@requires'] = roles
}
