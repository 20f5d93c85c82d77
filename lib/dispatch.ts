import cds from '@sap/cds'
import { backoffDelay } from './backoff'
import { callbackFor } from './callbacks'
import { decode, newMessage, timestampAt, CorruptMessage, type DecodedMessage } from './codec'
import { optionsFor } from './config'
import { isProgrammingError, isUnrecoverable } from './failures'
import { nextRun } from './recurrence'
import type { Claim, Store } from './store'
import type { MessageRow, Outcome, QueueOptions } from './interfaces'

const LOG = cds.log('queue')

/** The claim was taken over (lease expired) or the row deleted while the handler ran: its work is rolled back. */
export class ClaimLost extends Error {
  constructor(ID: string) {
    super(`Message ${ID} was claimed by another process or deleted while it ran; its work was rolled back`)
    this.name = 'ClaimLost'
  }
}

/**
 * What the handler sees as `req.queue`, besides CAP's scheduling fields: the stable message ID, the attempt, and a
 * signal that aborts on shutdown (after the grace period), on lease loss and after `handlerTimeout`.
 */
export interface QueueInfoAtRuntime {
  messageId: string
  attempt: number
  signal: AbortSignal
  [key: string]: unknown
}

export function eventFor(message: DecodedMessage, runtime?: QueueInfoAtRuntime): cds.Event {
  const init = (runtime ? { ...message.request, queue: { ...message.request.queue, ...runtime } } : { ...message.request }) as { event: string }
  return message.fromSend ? new cds.Request(init) : new cds.Event(init)
}

export function contextFor(message: DecodedMessage): Record<string, unknown> {
  const { id, tenant, locale, features } = message.context
  const Privileged = cds.User.Privileged as unknown as new (id: string) => cds.User
  const context: Record<string, unknown> = { user: new Privileged(message.userId ?? 'anonymous') }
  if (id) context.id = id
  if (tenant) context.tenant = tenant
  if (locale) context.locale = locale
  if (features) context.features = features
  return context
}

/** The parts of a service the dispatcher uses, typed as CAP behaves (cds-types is narrower). */
export interface Service {
  tx(ctx: object, fn: (tx: Service) => Promise<unknown>): Promise<unknown>
  dispatch(event: cds.Event): Promise<unknown>
}

/**
 * Dispatches a message through its service in a transaction of that service with the stored event context, as an
 * inbound adapter would: `req.on('succeeded')` works, and `inTx` runs in the same transaction after the handlers.
 */
async function dispatchInTx(
  message: DecodedMessage,
  runtime: QueueInfoAtRuntime | undefined,
  inTx: (srv: Service, result: unknown) => Promise<void>
): Promise<void> {
  const srv = cds.unqueued(await cds.connect.to(message.serviceName)) as unknown as Service
  await srv.tx(contextFor(message), async tx => {
    const result = await tx.dispatch(eventFor(message, runtime))
    await inTx(srv, result)
  })
}

/** Runs a message once, now, without a row (the in-memory queue). */
export function dispatchNow(message: DecodedMessage): Promise<void> {
  return dispatchInTx(message, undefined, async () => {})
}

/**
 * Runs one claimed message through its service, in a transaction of that service with the stored event context.
 * The row is deleted in that same transaction, so the handler's database writes and the completion commit or
 * roll back together.
 */
export async function attempt(
  row: MessageRow,
  claim: Claim,
  store: Store,
  signal: AbortSignal
): Promise<{ outcome: Outcome; message?: DecodedMessage }> {
  const prepared = prepare(row)
  if (prepared.outcome) return prepared
  const message = prepared.message
  const options = optionsFor(row.target)
  try {
    await dispatchInTx(message, runtimeInfo(row, signal), (srv, result) => succeeded(row, claim, message, store, srv, result))
    return { outcome: { kind: 'succeeded' }, message }
  } catch (error) {
    return { outcome: failure(error, row, options), message }
  }
}

export function runtimeInfo(row: MessageRow, signal: AbortSignal): QueueInfoAtRuntime {
  return { messageId: row.ID, attempt: row.attempts + 1, signal }
}

/** Deletes a processed message's row in the handler's transaction; false if the claim was lost meanwhile. */
export type Completion = (claim: Claim) => Promise<boolean>

/**
 * Records a handled message in the handler's transaction: completion (see `finish`) and its `#succeeded` callback.
 * `complete` deletes the row of a message that does not recur (a batch deletes all of its rows at once).
 */
export async function succeeded(
  row: MessageRow,
  claim: Claim,
  message: DecodedMessage,
  store: Store,
  srv: Service,
  result: unknown,
  complete: Completion = c => store.complete(c)
): Promise<void> {
  await finish(row, claim, message, store, complete)
  const callback = callbackFor(srv as unknown as cds.Service, message, { succeeded: result })
  if (callback) await store.insert(newMessage(row.target, callback), row.appid)
}

/** What an attempt needs before its handler runs: the decoded message, or the outcome that makes running it moot. */
export type Prepared = { message: DecodedMessage; outcome?: undefined } | { outcome: Outcome; message?: DecodedMessage }

/** Decodes a claimed row and settles the rows that must not run: corrupt, out of attempts, or not yet due. */
export function prepare(row: MessageRow): Prepared {
  const options = optionsFor(row.target)
  let message: DecodedMessage
  try {
    message = decode(row.msg, row.target)
  } catch (e) {
    return { outcome: { kind: 'dead', error: e, attempts: Math.max(row.attempts, options.maxAttempts) } }
  }
  if (row.attempts >= options.maxAttempts) {
    return { outcome: { kind: 'dead', error: row.lastError ?? 'maxAttempts reached', attempts: row.attempts }, message }
  }
  // Rows written by CAP's built-in queue with a delay become claimable at once: wait for their time.
  if (row.timestamp > Date.now()) return { outcome: { kind: 'deferred', dueAt: new Date(row.timestamp) }, message }
  return { message }
}

/**
 * Completes a processed message in the handler's transaction: deletes its row, or moves a recurring task to its next
 * occurrence. A task re-scheduled or unscheduled while it ran keeps that new state: the handler's work commits and
 * the task does not recur from here, so exactly one chain continues.
 */
async function finish(row: MessageRow, claim: Claim, message: DecodedMessage, store: Store, complete: Completion): Promise<void> {
  const queue = message.request.queue
  const next = nextRun(queue, Date.now(), optionsFor(row.target).timezone)
  const done = next ? await store.recur(claim, timestampAt(next.getTime()), next) : await complete(claim)
  if (done) return
  const scheduled = !!row.task || queue?.every !== undefined
  if (scheduled && !(await store.holdsOccurrence(row.ID, row.timestamp))) {
    LOG._debug && LOG.debug(`${row.target}: task ${row.task} was re-scheduled or unscheduled while it ran; it does not recur from this run`)
    return
  }
  throw new ClaimLost(row.ID)
}

export function failure(error: unknown, row: MessageRow, options: QueueOptions): Outcome {
  if (error instanceof ClaimLost) return { kind: 'lost' }
  const attempts = row.attempts + 1
  if (isProgrammingError(error) || isUnrecoverable(error) || error instanceof CorruptMessage) {
    return { kind: 'dead', error, attempts: Math.max(attempts, options.maxAttempts) }
  }
  if (attempts >= options.maxAttempts) return { kind: 'dead', error, attempts }
  return { kind: 'retry', error, attempts, delay: backoffDelay(attempts, options.backoff) }
}

export function logOutcome(row: MessageRow, outcome: Outcome): void {
  const what = `${row.target}: message ${row.ID}`
  switch (outcome.kind) {
    case 'succeeded':
      LOG._debug && LOG.debug(`${what} processed`)
      break
    case 'retry':
      LOG.warn(`${what} failed (attempt ${outcome.attempts}), retrying in ${outcome.delay} ms:`, outcome.error)
      break
    case 'dead':
      if (isProgrammingError(outcome.error)) LOG.error(`${what}: programming error in the handler, moved to dead letters:`, outcome.error)
      else LOG.error(`${what} is a dead letter after ${outcome.attempts} attempts:`, outcome.error)
      break
    case 'lost':
      LOG.warn(`${what}: claim lost while it ran; another process owns it now`)
      break
    case 'deferred':
      LOG._debug && LOG.debug(`${what} deferred to ${outcome.dueAt.toISOString()}`)
      break
  }
}
