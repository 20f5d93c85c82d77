import cds from '@sap/cds'
import { filterLog } from '../log'
import { reportedMissingTable } from './missing-tables'

/**
 * The store's entry point: the interface the runner and the API use (queue-store.ts), whichever store implements
 * it — the native store (native.ts, raw SQL on SQLite and PostgreSQL) or the portable one (portable.ts, CQL only);
 * choose.ts picks one.
 */

// Before `cds deploy` every path that reads the store fails on a missing table: one line a minute says it, not a
// stack trace each. Registered here, the entry point that both stores (native.ts, portable.ts) and their callers import.
filterLog(reportedMissingTable)

export type { DatabaseTransaction } from '../cap/transactions'
export type { BatchingStore, Parked, QueueStore, Savepointed } from './queue-store'

/** Runs `fn` in a new transaction of its own (claims, outcomes), detached from any caller's transaction. */
export function inOwnTransaction<T>(fn: () => Promise<T>): Promise<T> {
  return cds.tx(fn) as unknown as Promise<T>
}
