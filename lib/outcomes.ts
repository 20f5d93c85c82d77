import cds from '@sap/cds'
import { callbackFor } from './callbacks'
import { newMessage, type DecodedMessage } from './codec'
import { optionsFor } from './config'
import { storedError } from './failures'
import { inOwnTransaction, type Claim, type Store } from './store'
import type { MessageRow, Outcome } from './interfaces'

/**
 * Writes what an attempt came to, for outcomes the handler's own transaction could not record (it rolled back):
 * a retry, a dead letter with its `#failed` callback, or a row handed back unprocessed. Each in one short transaction.
 */
export async function recordOutcome(
  row: MessageRow,
  claim: Claim,
  outcome: Outcome,
  message: DecodedMessage | undefined,
  store: Store
): Promise<void> {
  if (outcome.kind === 'succeeded' || outcome.kind === 'lost') return
  const options = optionsFor(row.target)
  const now = Date.now()
  await inOwnTransaction(async () => {
    if (outcome.kind === 'deferred') return void (await store.release(claim, outcome.dueAt))
    const lastError = options.storeLastError ? storedError(outcome.error, options.maxErrorLength) : null
    // the wait counts from the recorded attempt time, so lastAttemptTimestamp + backoff = dueAt exactly
    if (outcome.kind === 'retry') return void (await store.fail(claim, outcome.attempts, lastError, new Date(now + outcome.delay), now))
    const leaveKey = options.orderingOnDeadLetter === 'continue'
    const recorded = await store.fail(claim, outcome.attempts, lastError, null, now, leaveKey)
    if (recorded && message) await writeFailedCallback(row, message, outcome.error, store)
  })
}

async function writeFailedCallback(row: MessageRow, message: DecodedMessage, error: unknown, store: Store): Promise<void> {
  let srv: cds.Service
  try {
    srv = cds.unqueued(await cds.connect.to(message.serviceName))
  } catch {
    return // no such service: nobody can listen for its callbacks
  }
  const callback = callbackFor(srv, message, { failed: error })
  if (callback) await store.insert(newMessage(row.target, callback), row.appid)
}
