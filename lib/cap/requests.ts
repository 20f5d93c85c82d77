import cds from '@sap/cds'

/**
 * CAP internal: `srv.send(...)` builds its request from any of its argument forms and hands it to `this.dispatch`, so
 * calling it on an object whose `dispatch` returns the request reuses CAP's argument handling on every cds version;
 * `req.query.flat()` gives a query without its service-specific targets (`_target`, `__target`).
 * Contract: test/cap/cap-contract.test.js "requests".
 */

/** The request `srv.send(...args)` would dispatch. */
export function requestFromSendArgs<T>(args: unknown[]): T {
  const capture = { dispatch: (req: T) => req }
  return (cds.Service.prototype.send as unknown as (...a: unknown[]) => T).apply(capture, args)
}

/** A query as plain CQN to store: flattened, without the targets CAP resolved for the service that received it. */
export function storableQuery(query: unknown): Record<string, unknown> {
  const q = query as { flat?: () => unknown }
  const flat = (typeof q.flat === 'function' ? q.flat() : q) as Record<string, unknown>
  return { ...flat, _target: undefined, __target: undefined, target: undefined }
}
