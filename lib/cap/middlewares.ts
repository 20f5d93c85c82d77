import cds from '@sap/cds'
import type { ErrorRequestHandler, RequestHandler } from 'express'

/**
 * CAP internals about express middlewares: `cds.middlewares.before` (documented) sets up `cds.context` and runs the
 * app's configured authentication; `cds.middlewares.after` (used by CAP's own protocol plugins such as
 * @cap-js/graphql, not in CAP's types) is CAP's final error handler, which answers `next(401)` with the
 * authentication strategy's login challenge (`WWW-Authenticate` for basic and mocked users) and formats other
 * errors as the protocol adapters do.
 * Contract: test/cap/cap-contract.test.js "middlewares".
 */

type Middlewares = { before: RequestHandler[]; after: ErrorRequestHandler[] }

/** CAP's middlewares around a custom route, so it authenticates and fails the way the app's services do. */
export function routeMiddlewares(): Middlewares {
  const { before, after } = cds.middlewares as unknown as Middlewares
  return { before, after }
}
