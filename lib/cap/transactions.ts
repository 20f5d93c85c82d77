import cds from '@sap/cds'

/**
 * CAP internal: how @cap-js/db-service keeps a database transaction (`tx.ready`, `tx.dbc`, `begin()`, which CAP calls
 * on the transaction itself at its first statement, before it takes a connection from the pool), that
 * `cds.db.tx(ctx)` returns the transaction a context already has, and that an ended root transaction marks its
 * context's `tx._done`. The store runs its statements on the driver connection of the caller's transaction instead of
 * through CAP's query pipeline, which costs more than the queue's small statements themselves.
 * Contract: test/cap/cap-contract.test.js "database transactions".
 */

/** CAP's database transaction as @cap-js/db-service implements it: the parts the store relies on. */
export interface DatabaseTransaction {
  /** Falsy until begun, then the promise of the begin; 'committed' or 'rolled back' once ended. */
  ready?: Promise<unknown> | string | boolean
  /** The driver connection, from begin until the transaction ends. */
  dbc?: unknown
  begin(): Promise<unknown>
  dispatch(req: unknown): Promise<unknown>
  [$beforeStatement]?: () => Promise<void>
}

/** Set on a view of a shared transaction (see `withFirstStatementHook`): runs before its first statement. */
const $beforeStatement = Symbol('before the first statement of a message in a shared transaction')

/** The database transaction of the current context, begun or not; undefined outside one or once it ended. */
export function transactionOfContext(): DatabaseTransaction | undefined {
  const ctx = cds.context as { tx?: { _done?: string } } | undefined
  if (!ctx?.tx || ctx.tx._done) return undefined
  const tx = (cds.db as unknown as { tx(ctx: object): DatabaseTransaction }).tx(ctx)
  return typeof tx.ready === 'string' ? undefined : tx
}

/** Begins `tx` the way CAP begins one on its first statement (session variables, BEGIN), unless it has begun. */
export async function begun(tx: DatabaseTransaction): Promise<void> {
  tx.ready ||= tx.begin().then(() => true)
  await tx.ready
}

/**
 * The driver connection of the current transaction, begun as CAP begins it, so later CAP statements of the same
 * transaction join it. Undefined outside a transaction or once it ended.
 */
export async function currentConnection(): Promise<unknown> {
  const tx = transactionOfContext()
  if (!tx) return undefined
  const beforeStatement = tx[$beforeStatement]
  await (beforeStatement ? beforeStatement() : begun(tx))
  return tx.dbc
}

/**
 * Runs `after` on `tx` as soon as it has begun, before its first statement, whoever begins it: CAP with the first
 * statement of a handler, or the store (`begun`). For a transaction that has not begun yet.
 */
export function afterBegin(tx: DatabaseTransaction, after: (tx: DatabaseTransaction) => Promise<void>): void {
  const begin = tx.begin as (this: DatabaseTransaction, ...args: unknown[]) => Promise<unknown>
  tx.begin = async function (this: DatabaseTransaction, ...args: unknown[]) {
    const begun = await begin.apply(this, args)
    await after(this)
    return begun
  }
}

/**
 * Runs `check` whenever `tx` begins, before it takes a connection: a `check` that throws fails the statement that
 * would have begun it, and no connection is opened. (A connection is what opens a tenant's database; on SQLite it
 * creates a missing database file.) `tx` must not have begun.
 */
export function beforeBegin(tx: DatabaseTransaction, check: () => void): void {
  const begin = tx.begin as (this: DatabaseTransaction, ...args: unknown[]) => Promise<unknown>
  tx.begin = function (this: DatabaseTransaction, ...args: unknown[]) {
    check()
    return begin.apply(this, args)
  }
}

/**
 * `shared` as one message of a batch sees it: `before` runs before the message's first statement, whether its
 * handlers run it through CAP (the service's `dispatch`) or the store runs it. `before` begins the transaction
 * itself, so CAP's begin-on-first-statement step is skipped.
 */
export function withFirstStatementHook(shared: DatabaseTransaction, before: () => Promise<void>): DatabaseTransaction {
  const dispatch = (Object.getPrototypeOf(shared) as DatabaseTransaction).dispatch
  return Object.create(shared, {
    [$beforeStatement]: { value: before },
    dispatch: { value: async function (this: DatabaseTransaction, req: unknown) { await before(); return dispatch.call(this, req) } }
  }) as DatabaseTransaction
}
