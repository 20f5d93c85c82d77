import cds from '@sap/cds'
import type { MessageRow, NewMessage, QueueSettings } from '../interfaces'
import { inOwnTransaction, type QueueStore } from '../store'
import { claimOf } from '../store/rules'
import { runInContext } from '../cap/contexts'
import { stillClaimedAsWritten } from './written'
import { brokerWaits } from './broker-waits'
import type { Gates } from './gates'
import type { Holdings } from './holdings'

import { LOG } from '../log'
import { clock } from '../time/clock'

/**
 * Claim at enqueue: while this process has a free slot, a message due now is written already claimed for it and runs
 * right after its transaction commits, with no claim round trip in between. Both halves of the protocol are here:
 * the enqueue (reserve a slot, write the claimed row, watch the transaction) and the run after commit.
 */

/**
 * How long a message claimed at enqueue stays claimed until its handler starts (then its lease is renewed like any):
 * if the process dies between commit and run, another takes the message over after this, not after `timeout`.
 */
const ENQUEUE_LEASE = 30_000

export function enqueueLease(queue: QueueSettings): number {
  return Math.min(ENQUEUE_LEASE, queue.timeout)
}

/** What claiming at enqueue needs of the runner. */
export interface ReservationHost {
  readonly store: QueueStore
  readonly owner: string
  /** Where a slot is promised to a message being enqueued, until it starts or goes back. */
  readonly holdings: Holdings
  readonly gates: Gates
  /** Started and not stopping: a reserved message can run after commit. */
  readonly running: boolean
  /** Processing is on hold (`Runner.hold`): nothing is claimed at enqueue. */
  readonly onHold: boolean
  run(queue: QueueSettings, rows: MessageRow[], claimedBy: string, reserved: boolean): void
  /** Claims soon: a message given up before the commit is left to the claim. */
  wake(): void
}

/** The enqueuing transaction's event context: its outcome decides whether the reserved slot runs or is freed. */
export interface TransactionContext {
  on(event: 'succeeded' | 'failed', listener: () => unknown): void
  /**
   * Runs `listener` before the listeners already registered (CAP's commit among them); 'commit': in the
   * transaction's commit, before the database commits (a listener that fails makes it roll back).
   */
  before(event: 'succeeded' | 'commit', listener: () => unknown): void
  [$reserved]?: Reserved[]
}

const $reserved = Symbol('messages claimed at enqueue in this transaction')

interface Reserved {
  row: MessageRow
  claimedBy: string
  queue: QueueSettings
}

/**
 * Writes `message` claimed for a slot this process reserves, and runs it once the transaction commits. False,
 * writing nothing, when the runner has no slot free or is not running: the caller then writes it unclaimed.
 * Reserved claims have an owner of their own, so a claim's read-back by (owner, time) never finds them.
 */
export async function claimAtEnqueue(host: ReservationHost, context: TransactionContext, message: NewMessage, queue: QueueSettings): Promise<boolean> {
  // a gated queue's starts are counted by the loop that claims them (see Gates)
  // an event for a broker this process waits for is written unclaimed: it waits in the table (broker-waits.ts)
  if (!host.running || host.onHold || host.gates.gated(cds.context?.tenant, queue) || brokerWaits.waiting(message.service)) return false
  if (!host.holdings.reserve(queue, message.ID)) return false
  const claimedBy = `${host.owner}:enqueued`
  const claimedAt = clock.now()
  try {
    await host.store.insertClaimed(message, { ID: message.ID, claimedBy, claimedAt }, claimedAt + enqueueLease(queue))
  } catch (e) {
    host.holdings.unreserve(message.ID)
    throw e
  }
  const { ID, target, msg } = message
  const row: MessageRow = { ID, target, msg, timestamp: message.dueAt.getTime(), attempts: 0, lastError: null, task: null, appid: null, claimedAt, interrupted: 0 }
  let reserved = context[$reserved]
  if (!reserved) {
    reserved = context[$reserved] = []
    watch(host, context, reserved)
  }
  reserved.push({ row, claimedBy, queue })
  return true
}

/**
 * One pair of listeners per transaction, however many messages it claims at enqueue. 'succeeded': the transaction
 * committed, they run. 'failed': it rolled back — or it committed and a 'succeeded' listener of someone else's threw
 * before ours ran (CAP then stops calling them and emits 'failed'): the table says which, so a committed message
 * runs right away whatever other listeners do, and no slot stays promised.
 */
function watch(host: ReservationHost, context: TransactionContext, reserved: Reserved[]): void {
  let settled = false
  // 'succeeded' is emitted only to commit: without it, 'failed' is a plain rollback
  let committing = false
  context.before('commit', () => keepStillClaimed(host, context, reserved))
  context.before('succeeded', () => void (committing = true))
  context.on('succeeded', () => {
    if (settled) return
    settled = true
    for (const { row, claimedBy, queue } of reserved) {
      host.holdings.commit(row.ID)
      runAfterCommit(host, row, claimedBy, queue)
    }
  })
  context.on('failed', () => {
    if (settled) return
    settled = true
    if (committing) return void setImmediate(() => void settleAfterFailure(host, reserved))
    for (const { row } of reserved) host.holdings.unreserve(row.ID)
  })
}

/**
 * Before the commit: what the transaction wrote into the rows decides (see written.ts). Messages no longer claimed as
 * written give their slots back and are left to the claim; the others run with what their rows say.
 */
async function keepStillClaimed(host: ReservationHost, context: TransactionContext, reserved: Reserved[]): Promise<void> {
  let kept: Reserved[] = []
  try {
    kept = await runInContext(context, () => stillClaimedAsWritten(host.store, reserved, clock.now()))
  } catch (e) {
    // the commit goes on: rows claimed in this process's name that it has no record of are handed back at a poll
    LOG.warn(`could not read back ${reserved.length} messages claimed at enqueue before the commit; they run when claimed:`, e)
  }
  for (const { row } of reserved.filter(entry => !kept.includes(entry))) host.holdings.unreserve(row.ID)
  if (kept.length < reserved.length) context.on('succeeded', () => host.wake())
  reserved.splice(0, reserved.length, ...kept)
}

async function settleAfterFailure(host: ReservationHost, reserved: Reserved[]): Promise<void> {
  cds.context = undefined
  let committed = new Set<string>()
  try {
    committed = await inOwnTransaction(() => host.store.stillClaimed(reserved.map(({ row, claimedBy }) => claimOf(row, claimedBy))))
  } catch (e) {
    // unknown: the rows that did commit are taken over once their short lease expires
    LOG.warn(`could not check whether ${reserved.length} messages claimed at enqueue were committed; they run when their lease expires:`, e)
  }
  for (const { row, claimedBy, queue } of reserved) {
    if (committed.has(row.ID)) {
      host.holdings.commit(row.ID)
      runAfterCommit(host, row, claimedBy, queue)
    } else {
      host.holdings.unreserve(row.ID)
    }
  }
}

/**
 * Runs a message written with a reserved slot, now that its transaction committed. One whose transaction stayed
 * open for a third of its lease goes back to the queue instead: renewals would start too late to keep the lease.
 */
function runAfterCommit(host: ReservationHost, row: MessageRow, claimedBy: string, queue: QueueSettings): void {
  // Detached from the committing request, like a claim pass: its handlers get the message's context only.
  setImmediate(() => {
    cds.context = undefined
    const stale = clock.now() - row.claimedAt > enqueueLease(queue) / 3
    if (!host.running || stale) void host.holdings.handBackReserved(row, claimedBy)
    else host.run(queue, [row], claimedBy, true)
  })
}
