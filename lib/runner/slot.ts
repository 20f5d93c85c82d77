import type { MessageRow, QueueSettings } from '../interfaces'
import { inOwnTransaction, type QueueStore } from '../store'
import { batches } from '../store/queue-store'
import { claimOf } from '../store/rules'
import { attempt, type AttemptResult } from './attempt'
import { attemptBatch, type BatchEntry } from './batch'
import { enqueueLease } from './reservations'
import { AttemptAborted, Lease, Renewals, tenantGone } from './lease'
import type { Gates } from './gates'
import type { Monitor } from './monitor'
import { failed, interrupted, logOutcome, recordOutcome } from './outcomes'
import { LOG } from '../log'

/**
 * A batch's messages that have not started after this long go back to the queue (see `handBackRest`): a batch of
 * fast handlers is done long before; behind a slow one, they would wait.
 */
const SLOT_TIME = 1000

/** What a slot needs of the runner it runs in. */
export interface SlotHost {
  readonly store: QueueStore
  readonly monitor: Monitor
  readonly gates: Gates
  /** The lease every claim takes (the default queue's `timeout`). */
  readonly claimLease: number
  /** The leases of running handlers: renewed while they run, handed back if they still run at shutdown. */
  readonly leases: Set<Lease>
  /** Claims of handlers abandoned after handlerTimeout, still running: this process knows them until their lease ends. */
  readonly abandoned: Set<string>
  readonly stopping: boolean
  /** Hands rows back unstarted, due again at their claim time. */
  handBack(rows: MessageRow[], claimedBy: string): Promise<void>
  wake(): void
}

interface Entry {
  row: MessageRow
  lease: Lease
}

/**
 * Runs claimed rows of one queue in one slot: one alone in its transaction, several as a batch. `reserved`: the rows
 * were written claimed at enqueue, with their queue's lease already (see reservations.ts).
 */
export async function runSlot(host: SlotHost, queue: QueueSettings, rows: MessageRow[], claimedBy: string, reserved: boolean): Promise<void> {
  const leaseUntil = rows[0].claimedAt + (reserved ? enqueueLease(queue) : queue.timeout)
  const renewals = new Renewals(queue.timeout, host.store, leaseUntil)
  const entries: Entry[] = rows.map(row => ({ row, lease: new Lease(claimOf(row, claimedBy), queue.handlerTimeout, renewals) }))
  let handBack: NodeJS.Timeout | undefined
  // Held from now on, for shutdown and for the loop's check of claims in this process's name.
  for (const { lease } of entries) host.leases.add(lease)
  try {
    // Claimed while shutdown began: hand them back unstarted.
    if (host.stopping) return await host.handBack(rows, claimedBy)
    if (!reserved && queue.timeout !== host.claimLease) {
      const claims = entries.map(e => e.lease.claim)
      await host.store.renewAll(claims, leaseUntil)
    }
    for (const { lease } of entries) lease.start()
    if (entries.length > 1) handBack = setTimeout(() => handBackRest(host, entries, claimedBy), SLOT_TIME)
    const results = await Promise.race([attemptAll(host.store, queue, entries), ...entries.map(e => e.lease.abandoned)])
    // the tenant was unsubscribed (its slot's messages share it): nothing of the attempts is written in its database
    if (entries.some(e => tenantGone(e.lease.signal))) return
    if (!results) {
      LOG.error(`${rows.map(r => `${r.target}: message ${r.ID}`).join(', ')}: did not finish within handlerTimeout; abandoned, taken over when the lease expires`)
      // a handler that started and did not finish has had its attempt: the takeover counts it
      const started = entries.filter(e => entries.length === 1 || e.lease.started).map(e => e.lease.claim)
      for (const { ID } of started) host.abandoned.add(ID)
      setTimeout(() => started.forEach(({ ID }) => host.abandoned.delete(ID)), queue.timeout).unref()
      await inOwnTransaction(() => host.store.interrupt(started))
      return
    }
    for (const [i, { row, lease }] of entries.entries()) await settle(host, queue, row, lease, results[i])
  } catch (e) {
    LOG.error(`could not run messages ${rows.map(r => r.ID).join(', ')}; their leases will expire:`, e)
  } finally {
    clearTimeout(handBack)
    for (const { lease } of entries) {
      lease.stop()
      host.leases.delete(lease)
    }
  }
}

function attemptAll(store: QueueStore, queue: QueueSettings, entries: Entry[]): Promise<AttemptResult[]> {
  if (entries.length === 1) {
    const { row, lease } = entries[0]
    lease.started = true
    return attempt(row, lease.claim, queue, store, lease.signal).then(result => [result])
  }
  if (!batches(store)) return attemptInTurn(store, queue, entries)
  const batch: BatchEntry[] = entries.map(({ row, lease }) => {
    const start = () => !lease.signal.aborted && (lease.started = true)
    return { row, claim: lease.claim, signal: lease.signal, committed: () => lease.stop(), start }
  })
  return attemptBatch(batch, queue, store)
}

/**
 * A slot's messages one after another, each in a transaction of its own: a store without savepoints (the portable
 * one) cannot share one. A message handed back before its turn does not start.
 */
async function attemptInTurn(store: QueueStore, queue: QueueSettings, entries: Entry[]): Promise<AttemptResult[]> {
  const results: AttemptResult[] = []
  for (const entry of entries) {
    const { row, lease } = entry
    if (lease.signal.aborted) {
      results.push({ outcome: failed(lease.signal.reason, row, queue) })
      continue
    }
    lease.started = true
    results.push(await attempt(row, lease.claim, queue, store, lease.signal))
    lease.stop()
  }
  return results
}

/** Logs and writes what one message's attempt came to. */
async function settle(host: SlotHost, queue: QueueSettings, row: MessageRow, lease: Lease, result: AttemptResult): Promise<void> {
  const outcome = interrupted(result.outcome, lease.signal)
  logOutcome(row, outcome)
  host.gates.settled(queue, outcome)
  try {
    await recordOutcome(lease.claim, outcome, result.message, queue, host.store)
    host.monitor.emit('outcome', { ID: row.ID, target: row.target, kind: outcome.kind })
  } catch (e) {
    LOG.error(`${row.target}: could not record the outcome of message ${row.ID}; its lease will expire:`, e)
  }
}

/**
 * Hands back the messages of a batch that have not started after `SLOT_TIME`, so a slow or stuck handler holds up
 * its own message only: they are due again at once, for any free slot of any process.
 */
function handBackRest(host: SlotHost, entries: Entry[], claimedBy: string): void {
  const rest = entries.filter(({ lease }) => !lease.started && !lease.signal.aborted)
  if (rest.length === 0) return
  for (const { row, lease } of rest) lease.abort(new AttemptAborted(`Message ${row.ID} was handed back: its slot is busy with a slow handler`, 'HANDED_BACK'))
  void host.handBack(rest.map(({ row }) => row), claimedBy).then(() => host.wake())
}
