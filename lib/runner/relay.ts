import cds from '@sap/cds'
import { runInContext } from '../cap/contexts'
import { isOutboundMessage, publishesConcurrently } from '../cap/messaging'
import { beforeBegin, transactionOfContext } from '../cap/transactions'
import { groupBy } from '../group-by'
import type { QueueSettings } from '../interfaces'
import { publishAll, publishesBatches, type BatchPublisher } from '../messaging/batch-publisher'
import type { QueueStore } from '../store'
import { wireHeaders } from '../wire'
import { notStarted, type AttemptResult, type ReadyEntry } from './attempt'
import { hasSucceededCallback } from './callbacks'
import { brokerWaits } from './broker-waits'
import { contextFor, dispatchInTx, runtimeInfo, serviceOf, sessionKey, traced } from './dispatch'
import { throwIfTenantGone } from './lease'
import { ClaimsLost, failed, failedTogether, isOccurrence, succeeded } from './outcomes'
import { clock } from '../time/clock'

/**
 * The relay of outbound messages in batches: the messages of a slot bound for a messaging service the relay publishes
 * to in batches go to its broker together, in one round trip, and their rows are then deleted together, in one
 * statement. Those services: the kind 'redis-streams' (lib/messaging/batch-publisher.ts: its XADDs in one pipeline),
 * and CAP's `redis-messaging`, whose messages are dispatched at once, each as it would be alone, so that its client
 * writes their PUBLISHes together (lib/cap/messaging.ts). CAP's other kinds are dispatched one at a time, as any
 * message: their clients' behaviour under concurrent sends is not known here (Kafka's adapter creates its producer
 * at the first send, and concurrent first sends race for it). Each message's outcome stays its own: the broker
 * answers each one, and one it refuses fails alone, as an attempt of its own, retried or dead-lettered as any; one
 * it cannot answer (away, the connection lost) comes to what any relay then comes to (broker-waits.ts: it waits,
 * uncharged), and so does one whose broker this process already waits for, which does not go out.
 *
 * What a message relayed to 'redis-streams' keeps of CAP's way through an outbound messaging service: CAP's
 * `message4` (the topic with `publishPrefix`, `prepareHeaders`: the CloudEvents attributes, where the queue's message
 * ID is the `id`) and the tenant of `cds.context`, per message, as the service's `handle` has them. What it does not
 * get, no more than through `handle`: handlers of the messaging service, which CAP's broker adapters and this plugin's
 * kind do not run for an outbound message, and a service transaction per message, whose only effect there would be
 * its event context. A message for `redis-messaging` keeps all of it: its own service transaction and context.
 *
 * Order: a claim takes at most one message per ordering key (see `keyIsFree` in store/statements.ts), the next one only
 * once the previous one's row is gone, i.e. after the broker accepted it and its completion committed. Messages
 * published together are therefore of different keys, or unordered.
 */

/** A service the relay publishes to in batches (see above). */
type Publisher = cds.Service & Partial<BatchPublisher>

/** The broker's answer to one message, and when it came; never a rejected promise, so that answers may wait to be read. */
type Answer = { accepted: true; at: number } | { accepted: false; error: unknown }

/**
 * Relays those of `entries` that are outbound messages for a messaging service the relay publishes to in batches,
 * their results in `results` (by index); returns the others, which the caller dispatches. A task's occurrence is
 * dispatched (it heads a transaction of its own, see batch.ts).
 */
export async function relayWhatCan(entries: ReadyEntry[], queue: QueueSettings, store: QueueStore, results: AttemptResult[]): Promise<ReadyEntry[]> {
  const relayed: { entry: ReadyEntry; srv: Publisher }[] = []
  const dispatched: ReadyEntry[] = []
  // by service name; undefined where it cannot be connected: its dispatch fails the message, as any attempt's
  const services = new Map<string, cds.Service | undefined>()
  for (const entry of entries) {
    const { serviceName } = entry.message
    if (!services.has(serviceName)) services.set(serviceName, (await serviceOf(entry.message).catch(() => undefined)) as cds.Service | undefined)
    const srv = services.get(serviceName)
    const publishes = srv && (publishesBatches(srv) || publishesConcurrently(srv))
    if (publishes && isOutboundMessage(srv, entry.message.request) && !isOccurrence(entry.row, entry.message)) relayed.push({ entry, srv })
    else dispatched.push(entry)
  }
  if (relayed.length) await relay(relayed, queue, store, results)
  return dispatched
}

/**
 * Publishes the messages, those of one service and session in one call (the runner may have handed some back: they do
 * not start), waits for the broker's answers, and records them: the accepted messages whose success writes nothing
 * but their completion together, in one transaction; one with a `#succeeded` listener in a transaction of its own,
 * as a dispatched message's success is written (its callback); the refused ones as failed attempts. Nothing of it
 * holds a database connection while the broker answers.
 */
async function relay(relayed: { entry: ReadyEntry; srv: Publisher }[], queue: QueueSettings, store: QueueStore, results: AttemptResult[]): Promise<void> {
  const answered: Promise<void>[] = []
  const together: Accepted[] = []
  const alone: Accepted[] = []
  for (const group of groupBy(relayed, ({ entry, srv }) => `${srv.name} ${sessionKey(entry.message)}`).values()) {
    const started = group.filter(({ entry }) => entry.start() || void (results[entry.index] = notStarted(entry, queue)))
    if (!started.length) continue
    const answers = publish(started[0].srv, started.map(({ entry }) => entry))
    started.forEach(({ entry, srv }, i) => answered.push(answers[i].then(answer => {
      if (!answer.accepted) return void (results[entry.index] = { outcome: failed(answer.error, entry.row, queue), message: entry.message })
      const accepted = { entry, srv, at: answer.at }
      if (hasSucceededCallback(srv, entry.message)) alone.push(accepted)
      else together.push(accepted)
    })))
  }
  await Promise.all(answered)
  if (together.length) await completeTogether(together, queue, store, results)
  for (const accepted of alone) results[accepted.entry.index] = await recordSuccess(accepted, queue, store)
}

/** A relayed message the broker accepted `at` (see `Outcome`), for the service `srv`. */
interface Accepted {
  entry: ReadyEntry
  srv: Publisher
  at: number
}

/** What an accepted message comes to once its success is written. */
const done = ({ entry, at }: Accepted): AttemptResult => ({ outcome: { kind: 'succeeded', answeredAt: at }, message: entry.message })

/**
 * Publishes `entries`, messages of one session for `srv`, at once: per entry, in order, the broker's answer, each in
 * the span of its attempt (see `traced`).
 */
function publish(srv: Publisher, entries: ReadyEntry[]): Promise<Answer>[] {
  const answered = (sent: Promise<unknown>) => sent.then((): Answer => ({ accepted: true, at: clock.now() }), (error: unknown): Answer => ({ accepted: false, error }))
  if (!publishesBatches(srv)) {
    // dispatched as each would be alone (dispatch.ts), all at once
    return entries.map(({ row, message, signal }) => answered(traced(row, message, () => dispatchInTx(message, runtimeInfo(row, signal), async () => {}, { claimed: row }))))
  }
  // a relay whose broker this process waits for does not start (unless it probes): it waits, uncharged (dispatchInTx
  // asks the same for the messages dispatched above)
  const waiting = new Map<ReadyEntry, unknown>()
  for (const entry of entries) {
    try {
      brokerWaits.admit(entry.message)
    } catch (error) {
      waiting.set(entry, error)
    }
  }
  const sending = entries.filter(entry => !waiting.has(entry))
  const messages = sending.map(({ row, message }) => {
    const { event, data } = message.request
    return { event: event as string, data, headers: wireHeaders(srv, message, row) }
  })
  const sent = sending.length ? runInContext(contextFor(sending[0].message), () => srv[publishAll](messages)) : []
  const sentOf = new Map(sending.map((entry, i) => [entry, sent[i]]))
  return entries.map(entry => {
    if (waiting.has(entry)) return Promise.resolve<Answer>({ accepted: false, error: waiting.get(entry) })
    return answered(traced(entry.row, entry.message, () => sentOf.get(entry)!))
  })
}

/**
 * Deletes the rows of `entries` in one statement, in one transaction: all of them, or (a claim lost meanwhile) none,
 * and then they go back to the queue without counting an attempt.
 */
async function completeTogether(accepted: Accepted[], queue: QueueSettings, store: QueueStore, results: AttemptResult[]): Promise<void> {
  const entries = accepted.map(({ entry }) => entry)
  try {
    await inTransactionOf(entries, store, async () => {
      const deleted = await store.completeAll(entries.map(entry => entry.claim))
      if (deleted !== entries.length) throw new ClaimsLost(entries.length, deleted)
    })
  } catch (error) {
    for (const entry of entries) results[entry.index] = { outcome: failedTogether(error, entry.row, queue), message: entry.message }
    return
  }
  for (const one of accepted) {
    one.entry.committed()
    results[one.entry.index] = done(one)
  }
}

/** A relayed message's success as a dispatched one's is written (its completion and callback), in a transaction of its own. */
async function recordSuccess(accepted: Accepted, queue: QueueSettings, store: QueueStore): Promise<AttemptResult> {
  const { entry, srv } = accepted
  const { row, claim, message } = entry
  try {
    await inTransactionOf([entry], store, () => succeeded(row, claim, message, queue, store, srv, undefined))
  } catch (error) {
    return { outcome: failed(error, row, queue), message }
  }
  entry.committed()
  return done(accepted)
}

/**
 * Runs `fn` in a transaction of the context of the first of `entries` (a slot's messages share a tenant), as a
 * dispatched message's work runs: SQLite's write lock taken as it begins, and not begun once their tenant was
 * unsubscribed (see dispatchInTx).
 */
function inTransactionOf(entries: ReadyEntry[], store: QueueStore, fn: () => Promise<void>): Promise<void> {
  return cds.tx(contextFor(entries[0].message), async () => {
    store.lockOnBegin()
    beforeBegin(transactionOfContext()!, () => entries.forEach(entry => throwIfTenantGone(entry.signal)))
    await fn()
  }) as unknown as Promise<void>
}
