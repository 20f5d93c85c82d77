import cds from '@sap/cds'
import { groupBy } from '../group-by'
import type { Claim, MessageRow, Outcome, QueueSettings } from '../interfaces'
import { inOwnTransaction, type QueueStore } from '../store'
import type { Tenant, Tenants } from '../tenants/tenants'
import type { AttemptResult } from './attempt'
import type { Gates } from './gates'
import { AttemptAborted, tenantGone, type Lease } from './lease'
import type { Monitor } from './monitor'
import { brokerWaits } from './broker-waits'
import { interrupted, logOutcome, recordOutcome } from './outcomes'
import type { Redelivery } from './redelivery'
import { payloadBytes, SlotCounters, type SlotCounts } from './slot-counters'
import { LOG } from '../log'
import { clock } from '../time/clock'

/** What the holdings need of the runner: where outcomes are written, who hears of them, and its wake-up. */
export interface HoldingsHost {
  readonly store: QueueStore
  /** Which tenants were unsubscribed in this process: nothing is written in their databases any more. */
  readonly tenants: Tenants
  readonly gates: Gates
  readonly monitor: Monitor
  /** The duplicate-delivery test mode (`deliver: 'twice'`); undefined: every message is delivered once. */
  readonly redelivery: Redelivery | undefined
  wake(...tenants: Tenant[]): void
}

/** A claimed message in a slot: from the slot's start until the slot ends. */
export interface HeldMessage {
  readonly row: MessageRow
  readonly lease: Lease
}

/** The messages one slot runs, of one queue and one claim; taken by `Holdings.start`, freed by `Holdings.end`. */
export class Slot {
  /** The tenant whose database holds the messages (slots run in their tenant's context). */
  readonly tenant: Tenant = cds.context?.tenant

  constructor(
    readonly queue: QueueSettings,
    readonly claimedBy: string,
    readonly entries: readonly HeldMessage[],
    /** What its messages hold of the heap, until it ends (see `payloadBytes`). */
    readonly bytes: number
  ) {}
}

/** A message claimed at enqueue: `open` while its transaction is, `committed` until it starts, `returning` while handed back. */
type Reservation = 'open' | 'committed' | 'returning'

/**
 * What this process holds of the queue table, in one place: its slots, the messages its slots run, the messages
 * claimed at enqueue that have not started (reservations.ts), and the handlers abandoned after `handlerTimeout` that
 * may still run. The transitions below are the only way to change it. Every message a slot holds ends here once —
 * settled with what its attempt came to, handed back unstarted, or abandoned — so the queue's gates (its circuit
 * breaker), the log, the table and the monitor learn of every outcome, whoever ran the attempt.
 */
export class Holdings {
  private readonly counters: SlotCounters
  /** The messages of running slots, until their slot ends: handed back at shutdown, never taken for orphans. */
  private readonly held = new Set<HeldMessage>()
  /** Messages of running slots whose attempt has begun (`begin`); a batch's later messages wait for their turn. */
  private readonly begun = new WeakSet<HeldMessage>()
  /** Messages of running slots that have ended (settled, handed back or abandoned): nothing more happens to them. */
  private readonly ended = new WeakSet<HeldMessage>()
  private readonly reservations = new Map<string, Reservation>()
  /**
   * Messages whose handlers were abandoned and may still run, by ID, with their tenant: this process knows them as
   * long as their rows are claimed in its name. Their rows stay 'processing' until a claim takes them over and counts
   * the attempt — however long that takes (a breaker the abandoned attempts opened keeps their queue from claims).
   */
  private readonly abandoned = new Map<string, string | undefined>()
  /** The running slots, for what a pause of their queue hands back (see `handBackQueue`). */
  private readonly running = new Set<Slot>()

  constructor(
    concurrency: number,
    batchSize: number,
    /** `maxClaimBytes`: the most bytes of messages the slots hold at once (see `SlotCounters.claimBounds`). */
    maxBytes: number,
    private readonly host: HoldingsHost
  ) {
    this.counters = new SlotCounters(concurrency, batchSize, maxBytes)
  }

  get slots(): SlotCounts {
    return this.counters
  }

  /** Committed messages claimed at enqueue, waiting for their slot to start: work a `flush()` must wait for. */
  get awaitingStart(): boolean {
    return [...this.reservations.values()].includes('committed')
  }

  /** Promises a slot to message `ID` of `queue` being enqueued (claim at enqueue); false when none is left. */
  reserve(queue: QueueSettings, ID: string): boolean {
    const promised = [...this.reservations.values()].filter(r => r !== 'returning').length
    if (!this.counters.fits(queue, promised)) return false
    this.reservations.set(ID, 'open')
    return true
  }

  /** The reserved message was not written, or its transaction did not commit: its slot is free again. */
  unreserve(ID: string): void {
    this.reservations.delete(ID)
  }

  /** The transaction of reserved message `ID` committed: it is about to run. */
  commit(ID: string): void {
    this.reservations.set(ID, 'committed')
  }

  /**
   * Takes a slot of `queue` for `entries`, claimed by `claimedBy`; `reserved`: they were claimed at enqueue, and their
   * promised slot is this one. HeldMessage from now on, for shutdown and for the loop's check of claims in this process's name.
   */
  start(queue: QueueSettings, claimedBy: string, entries: HeldMessage[], reserved: boolean): Slot {
    const bytes = payloadBytes(entries.map(held => held.row))
    this.counters.take(queue, bytes, entries.length)
    for (const held of entries) {
      this.held.add(held)
      if (reserved) this.reservations.delete(held.row.ID)
    }
    const slot = new Slot(queue, claimedBy, entries, bytes)
    this.running.add(slot)
    return slot
  }

  /**
   * The attempt of `held` begins, unless the runner has taken it back meanwhile (its signal aborted): false then.
   * Synchronous, so a hand-back and the start of the message never overlap: a begun message is not handed back
   * unstarted, and at shutdown it is released as a running handler's.
   */
  begin(held: HeldMessage): boolean {
    if (held.lease.signal.aborted) return false
    this.begun.add(held)
    return true
  }

  /** Logs and writes what one message's attempt came to, and tells its queue's gates and the monitor. */
  async settle(slot: Slot, held: HeldMessage, result: AttemptResult): Promise<void> {
    if (!this.closes(held)) return
    const { row, lease } = held
    // a relay whose broker is away waits, uncharged (broker-waits.ts)
    const outcome = brokerWaits.judge(interrupted(result.outcome, lease.signal), result.message)
    this.tell(slot, held, outcome)
    try {
      await recordOutcome(lease.claim, outcome, result.message, slot.queue, this.host.store)
      // in the slot, so that flush() and whoever awaits the outcome wait for the second delivery too
      await this.host.redelivery?.after(row, outcome, result.message, lease.signal)
      this.host.monitor.emit('outcome', { ID: row.ID, target: row.target, kind: outcome.kind })
    } catch (e) {
      LOG.error(`${row.target}: could not record the outcome of message ${row.ID}; its lease will expire:`, e)
    }
  }

  /**
   * Hands the messages of `slot` that have not started back, due again at their claim time, for any free slot of any
   * process (`why`: for their signals). Their signals abort first, so none of them starts meanwhile.
   */
  async handBackUnstarted(slot: Slot, why: string): Promise<void> {
    const rest = slot.entries.filter(held => !this.begun.has(held) && this.closes(held))
    if (rest.length === 0) return
    for (const { row, lease } of rest) lease.abort(new AttemptAborted(`Message ${row.ID} was handed back: ${why}`, 'HANDED_BACK'))
    await this.handBack(rest.map(({ row }) => row), slot.claimedBy)
    for (const held of rest) {
      const outcome: Outcome = { kind: 'deferred', dueAt: new Date(held.row.claimedAt) }
      this.tell(slot, held, outcome)
      this.host.monitor.emit('outcome', { ID: held.row.ID, target: held.row.target, kind: outcome.kind })
    }
    this.host.wake()
  }

  /**
   * Gives up waiting for the handlers of `slot`, one of which outlived its `handlerTimeout`: a started message's attempt
   * ends as abandoned (a failed attempt to its gates; taken over, and counted, once its lease expires), and the
   * messages of its batch that have not started go back.
   */
  async abandon(slot: Slot): Promise<void> {
    await this.handBackUnstarted(slot, 'its slot\'s handler did not finish within handlerTimeout')
    // a handler that started and did not finish has had its attempt: the takeover counts it
    const started = slot.entries.filter(held => !this.ended.has(held))
    for (const { row } of started) this.abandoned.set(row.ID, slot.tenant)
    for (const held of started) await this.settle(slot, held, { outcome: { kind: 'abandoned' } })
  }

  /**
   * Frees `slot` once it has run. A message that ended in none of the ways above (the database failed before it
   * started) is left to its lease: to its gates, like a lost claim, it says nothing about the remote system.
   */
  end(slot: Slot): void {
    this.running.delete(slot)
    for (const held of slot.entries) {
      held.lease.stop()
      this.held.delete(held)
      if (!this.ended.has(held)) this.host.gates.settled(slot.tenant, slot.queue, { kind: 'lost' })
    }
    // Also after a reserved message: a pass that found it running skipped planning the next due time, and its handler
    // may have queued a callback.
    if (this.counters.give(slot.queue, slot.bytes)) this.host.wake(slot.tenant)
  }

  /**
   * Rows that will not run here after all go back unstarted, due again at their claim time: those of a queue whose
   * limit a claim overshot, the rest of a batch behind a slow handler, reserved ones that cannot run now. Not in a
   * tenant that was unsubscribed meanwhile: its database is gone.
   */
  async handBack(rows: MessageRow[], claimedBy: string): Promise<void> {
    if (this.host.tenants.gone(cds.context?.tenant)) return
    try {
      await inOwnTransaction(() => this.host.store.release(rows.map(row => ({ ID: row.ID, claimedBy, claimedAt: row.claimedAt }))))
    } catch (e) {
      LOG.warn(`could not hand back ${rows.length} unstarted messages; they run when their leases expire:`, e)
    }
  }

  /** `queue` of `tenant` was paused: the messages its slots hold that have not started go back (running ones finish). */
  async handBackQueue(tenant: Tenant, queue: string): Promise<void> {
    const slots = [...this.running].filter(slot => slot.tenant === tenant && slot.queue.name === queue)
    for (const slot of slots) await this.handBackUnstarted(slot, 'its queue was paused')
  }

  /** A message claimed at enqueue that cannot run now (its transaction stayed open too long, shutdown) goes back. */
  async handBackReserved(row: MessageRow, claimedBy: string): Promise<void> {
    this.reservations.set(row.ID, 'returning')
    await this.handBack([row], claimedBy)
    this.reservations.delete(row.ID)
    this.host.wake()
  }

  /**
   * Of `claims` in this process's name in `tenant` according to the table, those it holds no record of (a copy of a
   * row re-inserted from a backup, say). Claims made since `since` may not be recorded yet: only older ones can be
   * orphans. An abandoned message whose row is no longer claimed here (taken over, or done) is forgotten.
   */
  orphans(claims: Claim[], since: number, tenant: string | undefined): Claim[] {
    const claimed = new Set(claims.map(c => c.ID))
    for (const [ID, of] of this.abandoned) if (of === tenant && !claimed.has(ID)) this.abandoned.delete(ID)
    const held = new Set([...this.held].map(({ lease }) => lease.claim.ID))
    return claims.filter(c => c.claimedAt < since && !held.has(c.ID) && !this.reservations.has(c.ID) && !this.abandoned.has(c.ID))
  }

  /**
   * At shutdown, after the grace period: aborts the handlers still running and hands their messages back, with the
   * messages of their batches that have not started (those a batch already handed back are no longer held). Each
   * release is guarded by the claim, so it never undoes a completion that committed meanwhile (that row is gone or no
   * longer ours).
   */
  async handBackRunning(grace: number): Promise<void> {
    // a signal aborted already is a handler timed out (its slot is abandoning it: the takeover counts its attempt), a
    // lost claim or a hand-back: none of them is this process's to hand back now
    const held = [...this.held].filter(({ lease }) => !tenantGone(lease.signal) && !lease.signal.aborted)
    const running = held.filter(h => this.begun.has(h)).map(({ lease }) => lease)
    const waiting = held.filter(h => !this.begun.has(h)).map(({ lease }) => lease)
    if (running.length + waiting.length === 0) return
    const rest = waiting.length ? ` and ${waiting.length} messages of their batches that had not started` : ''
    LOG.warn(`${running.length} handlers still running after the shutdown grace period of ${grace} ms: aborting them and handing back their messages${rest}`)
    for (const lease of [...running, ...waiting]) lease.abort(new AttemptAborted('The process is shutting down', 'SHUTDOWN'))
    try {
      let [fromRunning, fromWaiting] = [0, 0]
      const begun = new Set(running)
      for (const [tenant, leases] of groupBy([...running, ...waiting], l => l.tenant)) {
        await this.host.tenants.run(tenant, () =>
          inOwnTransaction(async () => {
            fromRunning += await this.host.store.release(leases.filter(l => begun.has(l)).map(l => l.claim), new Date(clock.now()))
            fromWaiting += await this.host.store.release(leases.filter(l => !begun.has(l)).map(l => l.claim), new Date(clock.now()))
          })
        )
      }
      // An aborted handler's own slot hands its message back too, racing this release: which of the two did it, or
      // whether the row completed or was taken over first, is not known here.
      const gone = running.length - fromRunning + (waiting.length - fromWaiting)
      const meanwhile = gone ? `; ${gone} were no longer claimed by this process (handed back by their aborted handler's slot, completed or taken over)` : ''
      LOG.info(`handed back ${fromRunning + fromWaiting} messages (${fromRunning} of running handlers, ${fromWaiting} not started)${meanwhile}`)
    } catch (e) {
      LOG.error(`could not hand back ${running.length + waiting.length} messages at shutdown; they are taken over when their leases expire:`, e)
    }
  }

  /**
   * A tenant is being unsubscribed: its running handlers' signals abort (UNSUBSCRIBED) and their slots stop waiting
   * for them; nothing of their attempts is written — no outcome, renewal, hand-back or completion (see `tenantGone`).
   */
  abandonTenant(tenant: string): void {
    const leases = [...this.held].map(({ lease }) => lease).filter(l => l.tenant === tenant)
    if (leases.length) LOG.info(`tenant ${tenant} is unsubscribed: abandoning ${leases.length} of its messages in this process, without writing in its database`)
    for (const lease of leases) lease.abandon(new AttemptAborted(`Message ${lease.claim.ID}: its tenant ${tenant} was unsubscribed`, 'UNSUBSCRIBED'))
    // its rows are gone with its database: no reconciliation there will forget them
    for (const [ID, of] of this.abandoned) if (of === tenant) this.abandoned.delete(ID)
  }

  /** Marks `held` as ended; false if it had ended already (a message of a slot ends once). */
  private closes(held: HeldMessage): boolean {
    if (this.ended.has(held)) return false
    this.ended.add(held)
    return true
  }

  /** Logs how a message ended and tells its queue's gates (a circuit breaker counts failures and successes). */
  private tell(slot: Slot, held: HeldMessage, outcome: Outcome): void {
    logOutcome(held.row, outcome)
    this.host.gates.settled(slot.tenant, slot.queue, outcome)
  }
}
