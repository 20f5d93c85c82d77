import cds from '@sap/cds'
import { contextWithTransaction, runInContext } from '../cap/contexts'
import { beforeBegin } from '../cap/transactions'
import { groupBy } from '../group-by'
import type { Claim, QueueSettings } from '../interfaces'
import type { BatchingStore, DatabaseTransaction } from '../store'
import { notStarted, type AttemptResult, type ReadyEntry } from './attempt'
import { asBatchMessage, type BatchMessage } from './batch-connections'
import { contextFor, eventFor, runtimeInfo, serviceOf, sessionKey, traced, type Service } from './dispatch'
import { brokerWaits } from './broker-waits'
import { throwIfTenantGone } from './lease'
import { ClaimsLost, failed, failedTogether, isOccurrence, NOT_STARTED, stillScheduled, succeeded } from './outcomes'
import { wireHeaders } from '../wire'
import { LOG } from '../log'
import { clock } from '../time/clock'

/**
 * Several claimed messages in one database transaction: a transaction per message caps throughput at the
 * database's commit rate. Each message's handlers run in a savepoint of their own, taken before its first statement
 * (see `Store.savepointed`), so a failing handler rolls back its own work only; the rows of the processed messages
 * are deleted together at the end, in the same transaction, so their handlers' writes and their deletion still
 * commit together. A retry or dead letter is recorded after the batch, as for a message run alone.
 */

/** A service transaction as CAP returns it from `srv.tx(ctx)`: finished by the batch once the database commits. */
interface ServiceTx extends Service {
  commit(): Promise<unknown>
  rollback(error?: unknown): Promise<unknown>
}

/**
 * A transaction takes no further messages once it has run this long: it bounds how long a batch holds its locks
 * (on SQLite, the database's single write lock from its first write on) when handlers are slow.
 */
const TRANSACTION_TIME = 100

/**
 * Runs the `ready` entries of one claim of one queue (what the relay left of them, see slot.ts) one after another,
 * grouped by session, each group in as few transactions as `TRANSACTION_TIME` allows; results in `results` by
 * their index. One after another: a batch is one of the runner's `concurrency` slots.
 */
export async function attemptBatch(ready: ReadyEntry[], queue: QueueSettings, store: BatchingStore, results: AttemptResult[]): Promise<void> {
  for (const group of groupBy(ready, entry => sessionKey(entry.message)).values()) {
    for (let from = 0; from < group.length; ) from += await runInOneTransaction(group.slice(from), queue, store, results)
  }
}

/**
 * Runs the first entries of `group` in one transaction, as many as `TRANSACTION_TIME` allows; how many it ran. A task's
 * occurrence only heads one: whether it may start is read before the transaction begins (see `stillScheduled`).
 */
async function runInOneTransaction(group: ReadyEntry[], queue: QueueSettings, store: BatchingStore, results: AttemptResult[]): Promise<number> {
  const head = group[0]
  if (isOccurrence(head.row, head.message) && !(await stillScheduled(head.claim, store))) {
    // as a message that must not run (prepareAll): unless the runner handed it back meanwhile
    results[head.index] = head.start() ? { outcome: NOT_STARTED, message: head.message } : notStarted(head, queue)
    return 1
  }
  const started = Date.now()
  let taken = 0
  const failedWith = (entry: ReadyEntry, error: unknown): AttemptResult => ({ outcome: failed(error, entry.row, queue), message: entry.message })
  const handled: { entry: ReadyEntry; tx: ServiceTx }[] = []
  try {
    await cds.tx(contextFor(group[0].message), async () => {
      const shared = store.sharedTransaction()
      // the group's messages share a tenant: unsubscribed, its database is not opened again (see dispatchInTx)
      const tenantPresent = () => group.forEach(entry => throwIfTenantGone(entry.signal))
      beforeBegin(shared, tenantPresent)
      // Rows to delete: a message's only once all of its work succeeded (a `#succeeded` callback may still fail).
      const completed: Claim[] = []
      let completes: Claim | undefined
      const complete = async (claim: Claim) => ((completes = claim), true)
      for (const [i, entry] of group.entries()) {
        if (i > 0 && (Date.now() - started > TRANSACTION_TIME || isOccurrence(entry.row, entry.message))) break
        taken++
        // Shutdown, a lost lease or a hand-back while its neighbours ran: it does not start (the runner hands it back
        // or drops it).
        if (!entry.start()) {
          results[entry.index] = failedWith(entry, entry.signal.reason)
          continue
        }
        const part = store.savepointed(shared, `queue_message_${i}`)
        completes = undefined
        const running: BatchMessage = { shared, running: true, conflict: false }
        const tx = await asBatchMessage(running, () => runOne(entry, part.tx, queue, store, complete)).then(
          async tx => {
            if (!running.conflict) return tx
            await tx.rollback().catch(() => {})
            throw new Error('gave the message up')
          }
        ).catch(async (error: unknown) => {
          await part.rollback()
          // its handler waited for a transaction of its own (see batch-connections.ts): it runs again, alone
          results[entry.index] = running.conflict ? { outcome: { kind: 'deferred', dueAt: new Date(clock.now()), alone: true }, message: entry.message } : failedWith(entry, error)
        }).finally(() => (running.running = false))
        if (!tx) continue
        // A handler that caught a database error of its own left PostgreSQL's transaction aborted: keeping its part
        // fails, and so would every neighbour. Its part is undone instead and it fails alone, as it would alone.
        const kept = await part.release().then(() => true, async (error: unknown) => {
          await part.rollback()
          await tx.rollback(error).catch(() => {})
          results[entry.index] = failedWith(entry, error)
          return false
        })
        if (!kept) continue
        if (completes) completed.push(completes)
        handled.push({ entry, tx })
      }
      tenantPresent()
      const deleted = completed.length ? await store.completeAll(completed) : 0
      if (deleted !== completed.length) throw new ClaimsLost(completed.length, deleted)
    })
  } catch (error) {
    // Nothing of the transaction committed: every message it took failed with it (all of them if it never began).
    // After a lost claim, the claims still ours are handed back without counting an attempt (the release is
    // guarded: a lost one stays with its owner).
    taken ||= group.length
    for (const { entry, tx } of handled.splice(0)) {
      await tx.rollback().catch(() => {})
      results[entry.index] = { outcome: failedTogether(error, entry.row, queue), message: entry.message }
    }
    for (const entry of group.slice(0, taken)) results[entry.index] ??= failedWith(entry, error)
    return taken
  }
  // `req.on('succeeded')` of each message fires once its work is committed, i.e. after the transaction.
  for (const { entry, tx } of handled) {
    entry.committed()
    await tx.commit().catch((e: unknown) => LOG.warn(`${entry.row.target}: message ${entry.row.ID}: a 'succeeded' listener failed after commit:`, e))
    results[entry.index] = { outcome: { kind: 'succeeded' }, message: entry.message }
  }
  return taken
}

/**
 * Dispatches one message in a service transaction of its own context (correlation id, headers, its own
 * `succeeded`/`failed` listeners), whose database transaction is its part of the shared one.
 */
async function runOne(entry: ReadyEntry, db: DatabaseTransaction, queue: QueueSettings, store: BatchingStore, complete: (claim: Claim) => Promise<boolean>): Promise<ServiceTx> {
  const { row, claim, message, signal } = entry
  const srv = (await serviceOf(message)) as Service & { tx(ctx: object): ServiceTx }
  // a relay whose broker this process waits for does not start (unless it probes): it waits, uncharged
  brokerWaits.admit(message)
  const ctx = contextWithTransaction(contextFor(message), db)
  const tx = srv.tx(ctx)
  try {
    await traced(row, message, () => runInContext(ctx, async () => {
      const result = await tx.dispatch(eventFor(message, runtimeInfo(row, signal), wireHeaders(srv as unknown as cds.Service, message, row)))
      throwIfTenantGone(signal)
      await succeeded(row, claim, message, queue, store, srv as unknown as cds.Service, result, complete)
    }))
  } catch (error) {
    await tx.rollback(error).catch(() => {})
    throw error
  }
  return tx
}
