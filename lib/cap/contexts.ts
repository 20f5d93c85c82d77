import cds from '@sap/cds'
import type { DatabaseTransaction } from './transactions'

/**
 * CAP internal: an event context keeps the transactions of its services in a `transactions` registry (`_set`), which
 * `srv.tx(ctx)` consults; `cds._with(ctx, fn)` runs `fn` with `ctx` as `cds.context`. A batch gives each message an
 * event context of its own whose database transaction is that message's part of the batch's shared one.
 * Contract: test/cap/cap-contract.test.js "event contexts".
 */

interface EventContext {
  _set(property: 'transactions', value: Map<unknown, unknown>): unknown
}

/** A new event context from `init` whose database transaction (for `cds.db`) is `tx`. */
export function contextWithTransaction(init: object, tx: DatabaseTransaction): object {
  const Context = cds.EventContext as unknown as new (init: object) => EventContext
  const ctx = new Context(init)
  ctx._set('transactions', new Map([[cds.db, tx]]))
  return ctx
}

/** Runs `fn` with `ctx` as `cds.context`; what it returns. */
export function runInContext<T>(ctx: object, fn: () => T): T {
  return (cds as unknown as { _with(ctx: unknown, fn: () => T): T })._with(ctx, fn)
}

/**
 * Runs `fn` with a new event context made of `init` as `cds.context`: it has no transaction, not even the caller's,
 * so each statement `fn` runs is a transaction of its own unless `fn` opens one.
 */
export function runDetached<T>(init: object, fn: () => Promise<T>): Promise<T> {
  const Context = cds.EventContext as unknown as new (init: object) => object
  return runInContext(new Context(init), fn)
}
