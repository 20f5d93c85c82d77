import cds from '@sap/cds'
import type { DecodedMessage } from './codec'
import { contextFor, eventFor, failure, prepare, runtimeInfo, succeeded, type Service } from './dispatch'
import { optionsFor } from './config'
import type { Claim, Store } from './store'
import type { MessageRow, Outcome } from './interfaces'

/**
 * Several claimed messages in one database transaction, a savepoint around each: a transaction per message caps
 * throughput at the database's commit rate. A handler's writes and its row's deletion still commit together, and a
 * failing handler rolls back to its savepoint only; its retry or dead letter is recorded after the batch, as today.
 */

export interface BatchEntry {
  row: MessageRow
  claim: Claim
  signal: AbortSignal
}

export interface AttemptResult {
  outcome: Outcome
  message?: DecodedMessage
}

interface Ready extends BatchEntry {
  message: DecodedMessage
  index: number
}

/** A service transaction as CAP returns it from `srv.tx(ctx)`: finished by the batch once the database commits. */
interface ServiceTx extends Service {
  commit(): Promise<unknown>
  rollback(error?: unknown): Promise<unknown>
}

/** CAP's event context, with the internal registry of a context's transactions per service. */
interface EventContext {
  _set(property: 'transactions', value: Map<unknown, unknown>): unknown
}

/**
 * Messages share a transaction only with the same tenant, user, locale and features: the database session of a
 * transaction carries them (`$user`, `$tenant`, localized views), set once when it begins.
 */
function sessionKey(message: DecodedMessage): string {
  const { tenant, locale, features } = message.context
  return JSON.stringify([tenant, message.userId, locale, features])
}

/** Runs the entries of one claim, grouped by session, each group in one transaction; results in entry order. */
export async function attemptBatch(entries: BatchEntry[], store: Store): Promise<AttemptResult[]> {
  const results: AttemptResult[] = new Array(entries.length)
  const groups = new Map<string, Ready[]>()
  entries.forEach((entry, index) => {
    const prepared = prepare(entry.row)
    if (prepared.outcome) return void (results[index] = prepared)
    const key = sessionKey(prepared.message)
    const group = groups.get(key) ?? []
    group.push({ ...entry, message: prepared.message, index })
    groups.set(key, group)
  })
  await Promise.all([...groups.values()].map(group => runGroup(group, store, results)))
  return results
}

async function runGroup(group: Ready[], store: Store, results: AttemptResult[]): Promise<void> {
  const handled: { entry: Ready; tx: ServiceTx }[] = []
  try {
    await cds.tx(contextFor(group[0].message), async () => {
      // The batch's database transaction, shared by every message's own context below.
      const db = (cds.db as unknown as { tx(ctx: unknown): unknown }).tx(cds.context)
      for (const [i, entry] of group.entries()) {
        // Shutdown or a lost lease while its neighbours ran: it does not start (the runner hands it back or drops it).
        if (entry.signal.aborted) {
          results[entry.index] = { outcome: failure(entry.signal.reason, entry.row, optionsFor(entry.row.target)), message: entry.message }
          continue
        }
        const savepoint = `queue_message_${i}`
        await store.savepoint(savepoint)
        const tx = await runOne(entry, db, store).catch(async (error: unknown) => {
          await store.rollbackToSavepoint(savepoint)
          results[entry.index] = { outcome: failure(error, entry.row, optionsFor(entry.row.target)), message: entry.message }
        })
        if (!tx) continue
        await store.releaseSavepoint(savepoint)
        handled.push({ entry, tx })
      }
    })
  } catch (error) {
    // Nothing of the batch committed: every handled message failed with the batch.
    for (const { entry, tx } of handled.splice(0)) {
      await tx.rollback().catch(() => {})
      results[entry.index] = { outcome: failure(error, entry.row, optionsFor(entry.row.target)), message: entry.message }
    }
    for (const entry of group) results[entry.index] ??= { outcome: failure(error, entry.row, optionsFor(entry.row.target)), message: entry.message }
    return
  }
  // `req.on('succeeded')` of each message fires once its work is committed, i.e. after the batch.
  for (const { entry, tx } of handled) {
    await tx.commit().catch((e: unknown) => cds.log('queue').warn(`${entry.row.target}: message ${entry.row.ID}: a 'succeeded' listener failed after commit:`, e))
    results[entry.index] = { outcome: { kind: 'succeeded' }, message: entry.message }
  }
}

/**
 * Dispatches one message in a service transaction of its own context (correlation id, headers, its own
 * `succeeded`/`failed` listeners), whose database transaction is the batch's: CAP finds a context's transactions
 * per service in its `transactions` registry, so the batch's is entered there before the handlers run.
 */
async function runOne(entry: Ready, db: unknown, store: Store): Promise<ServiceTx> {
  const { row, claim, message, signal } = entry
  const srv = cds.unqueued(await cds.connect.to(message.serviceName)) as unknown as Service & { tx(ctx: object): ServiceTx }
  const Context = cds.EventContext as unknown as new (init: object) => EventContext
  const ctx = new Context(contextFor(message))
  ctx._set('transactions', new Map([[cds.db, db]]))
  const tx = srv.tx(ctx)
  try {
    await (cds as unknown as { _with(ctx: unknown, fn: () => Promise<void>): Promise<void> })._with(ctx, async () => {
      const result = await tx.dispatch(eventFor(message, runtimeInfo(row, signal)))
      await succeeded(row, claim, message, store, srv, result)
    })
  } catch (error) {
    await tx.rollback(error).catch(() => {})
    throw error
  }
  return tx
}
