import type { MessageRow, QueueSettings } from '../interfaces'
import type { QueueStore } from '../store'
import { batches } from '../store/queue-store'
import { claimOf } from '../store/rules'
import { attempt, notStarted, prepareAll, type AttemptResult, type ReadyEntry, type SlotEntry } from './attempt'
import { attemptBatch } from './batch'
import { relayWhatCan } from './relay'
import type { HeldMessage, Holdings } from './holdings'
import { enqueueLease } from './reservations'
import { Lease, Renewals, tenantGone } from './lease'
import { LOG } from '../log'

/**
 * A batch's messages that have not started after this long go back to the queue (see `Holdings.handBackUnstarted`):
 * a batch of fast handlers is done long before; behind a slow one, they would wait.
 */
const SLOT_TIME = 1000

/** What a slot needs of the runner it runs in. */
export interface SlotHost {
  readonly store: QueueStore
  /** Where the slot is taken and freed, and where each of its messages ends. */
  readonly holdings: Holdings
  /** The lease every claim takes (the default queue's `timeout`). */
  readonly claimLease: number
  readonly stopping: boolean
}

/**
 * Runs claimed rows of one queue in one slot: one alone in its transaction, several as a batch. `reserved`: the rows
 * were written claimed at enqueue, with their queue's lease already (see reservations.ts).
 */
export async function runSlot(host: SlotHost, queue: QueueSettings, rows: MessageRow[], claimedBy: string, reserved: boolean): Promise<void> {
  const { holdings } = host
  const leaseUntil = rows[0].claimedAt + (reserved ? enqueueLease(queue) : queue.timeout)
  const renewals = new Renewals(queue.timeout, host.store, leaseUntil)
  const entries: HeldMessage[] = rows.map(row => ({ row, lease: new Lease(claimOf(row, claimedBy), queue.handlerTimeout, renewals) }))
  const slot = holdings.start(queue, claimedBy, entries, reserved)
  let handBack: NodeJS.Timeout | undefined
  try {
    // Claimed while shutdown began: hand them back unstarted.
    if (host.stopping) return await holdings.handBackUnstarted(slot, 'the process is shutting down')
    if (!reserved && queue.timeout !== host.claimLease) {
      const claims = entries.map(e => e.lease.claim)
      await host.store.renewAll(claims, leaseUntil)
    }
    for (const { lease } of entries) lease.start()
    // A slow or stuck handler holds up its own message only: the rest of its batch is due again at once elsewhere.
    if (entries.length > 1) handBack = setTimeout(() => void holdings.handBackUnstarted(slot, 'its slot is busy with a slow handler'), SLOT_TIME)
    const results = await Promise.race([attemptAll(host.store, holdings, queue, entries), ...entries.map(e => e.lease.abandoned)])
    // the tenant was unsubscribed (its slot's messages share it): nothing of the attempts is written in its database
    if (entries.some(e => tenantGone(e.lease.signal))) return
    if (!results) return await holdings.abandon(slot)
    for (const [i, held] of entries.entries()) await holdings.settle(slot, held, results[i])
  } catch (e) {
    LOG.error(`could not run messages ${rows.map(r => r.ID).join(', ')}; their leases will expire:`, e)
  } finally {
    clearTimeout(handBack)
    holdings.end(slot)
  }
}

/**
 * The attempts of a slot's messages, in one shape whatever their number: decode them and settle those that must not run
 * (`prepareAll`), relay the outbound messages the relay publishes in batches, together (relay.ts), then run the rest —
 * several in shared transactions where the store has savepoints (batch.ts), else one after another, each in a
 * transaction of its own (a message alone; the portable store). Results in entry order.
 */
async function attemptAll(store: QueueStore, holdings: Holdings, queue: QueueSettings, entries: HeldMessage[]): Promise<AttemptResult[]> {
  const slot: SlotEntry[] = entries.map(held => {
    const { row, lease } = held
    return { row, claim: lease.claim, signal: lease.signal, committed: () => lease.stop(), start: () => holdings.begin(held) }
  })
  const results: AttemptResult[] = new Array(entries.length)
  const ready = await relayWhatCan(prepareAll(slot, queue, results), queue, store, results)
  if (ready.length > 1 && batches(store)) await attemptBatch(ready, queue, store, results)
  else await attemptInTurn(ready, queue, store, results)
  return results
}

/** The `ready` entries one after another, each in a transaction of its own; one handed back before its turn does not start. */
async function attemptInTurn(ready: ReadyEntry[], queue: QueueSettings, store: QueueStore, results: AttemptResult[]): Promise<void> {
  for (const entry of ready) {
    if (!entry.start()) {
      results[entry.index] = notStarted(entry, queue)
      continue
    }
    results[entry.index] = await attempt(entry, queue, store)
    entry.committed()
  }
}
