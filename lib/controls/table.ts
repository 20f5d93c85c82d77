import cds from '@sap/cds'
import type { RateLimitSettings } from '../interfaces'
import { dialectFor } from '../store/dialects'
import { iso, millis } from '../store/rows'
import { take, type Taken } from './rate-window'
import { clock } from '../time/clock'

/**
 * Every statement on `cds.outbox.QueueControls` (db/controls.cds), in CQL, so the native and the portable store share
 * them (but for creating a row on SQLite and PostgreSQL, see `created`): they run per pause, breaker change and
 * rate-limited start, never per message of an unlimited queue. Each runs in the current transaction (the caller's own
 * short one), in the current tenant's database.
 */

export const CONTROLS = 'cds.outbox.QueueControls'
/** The table as SQL names it, unquoted (PostgreSQL folds it to lower case, as CAP created it). */
const TABLE = 'cds_outbox_QueueControls'

/** A circuit breaker's state as the table shares it: `until` is when an open breaker lets a probe run. */
export type BreakerState = 'closed' | 'open' | 'probing'

export interface SharedBreaker {
  state: BreakerState
  /** Epoch ms: when a probe may run (open), or when the probe began (probing). */
  until: number | undefined
  /** Which instance changed it last (its `claimedBy` name). */
  by: string | undefined
  /** Epoch ms of the last change. */
  at: number | undefined
}

/** One queue's controls as operators and runners read them. */
export interface QueueControl {
  queue: string
  /** Epoch ms since when an operator has paused it; undefined: not paused. */
  pausedAt: number | undefined
  pausedBy: string | undefined
  breaker: SharedBreaker
}

const COLUMNS = ['queue', 'pausedAt', 'pausedBy', 'breaker', 'breakerUntil', 'breakerBy', 'breakerAt']

type Row = Record<string, unknown>

const time = (value: unknown): number | undefined => {
  const ms = millis(typeof value === 'string' ? value : value instanceof Date ? value.toISOString() : undefined)
  return Number.isNaN(ms) ? undefined : ms
}
const text = (value: unknown): string | undefined => (typeof value === 'string' && value ? value : undefined)

function controlOf(row: Row): QueueControl {
  const pausedAt = time(row.pausedAt)
  const state = row.breaker === 'open' || row.breaker === 'probing' ? row.breaker : 'closed'
  return {
    queue: String(row.queue),
    pausedAt,
    pausedBy: pausedAt === undefined ? undefined : text(row.pausedBy),
    breaker: { state, until: time(row.breakerUntil), by: text(row.breakerBy), at: time(row.breakerAt) }
  }
}

const key = (appid: string | undefined, queue: string) => ({ appid: appid ?? '', queue })

/**
 * The row of `queue`, created if missing, locked by the current transaction until it ends, then read: an UPDATE that
 * changes nothing takes the row's lock on every database (and SQLite's write lock, before anything is read, so another
 * process's commit cannot make this transaction's later write fail), and the read that follows sees what the
 * transaction that held the lock before committed. A row created by two transactions at once is created once.
 */
async function locked(appid: string | undefined, queue: string, columns: string[]): Promise<Row> {
  const lock = async () => (await UPDATE(CONTROLS).with({ rateWindow: { ref: ['rateWindow'] } }).where(key(appid, queue))) as unknown as number
  if (!(await lock())) {
    await created(appid, queue)
    await lock()
  }
  return (await SELECT.one.from(CONTROLS).columns(...columns).where(key(appid, queue))) as Row
}

/**
 * Creates the row of `queue` unless it exists, writing its keys only: a transaction that created it at the same time
 * and committed first keeps what it wrote. Not CAP's UPSERT on SQLite and PostgreSQL: it writes every column, those it
 * is not given as its statement's snapshot saw the row, so on PostgreSQL a row created and written by another
 * transaction meanwhile lost what that one wrote (test/cap/cap-contract.test.js "UPSERT"); instances starting together each
 * took a rate limit's whole window. Elsewhere (HANA, the portable store's other target) CAP's UPSERT, untested here.
 */
async function created(appid: string | undefined, queue: string): Promise<void> {
  const db = cds.db as unknown as { kind: string; run(sql: string, params: unknown[]): Promise<unknown> }
  if (db.kind !== 'sqlite' && db.kind !== 'postgres') return void (await UPSERT.into(CONTROLS).entries(key(appid, queue)))
  const { appid: app, queue: name } = key(appid, queue)
  await db.run(dialectFor(db.kind).prepare(`INSERT INTO ${TABLE} (appid, queue) VALUES (?, ?) ON CONFLICT (appid, queue) DO NOTHING`), [app, name])
}

/** The controls of this app's queues (only those with a row: every other queue runs freely). */
export async function readControls(appid: string | undefined): Promise<QueueControl[]> {
  const rows = (await SELECT.from(CONTROLS).columns(...COLUMNS).where({ appid: appid ?? '' })) as Row[]
  return rows.map(controlOf)
}

/**
 * Up to `wanted` starts of `queue` from its shared window, counted at the time the row is locked: the messages start
 * right after this transaction, however long the lock took to get. The time is the database's, as every instance
 * writes and reads the window in it: by its own clock, an instance two hours behind stored starts the others took for
 * over an hour old, and they started a second hour's worth (test/runner/rate-limit-instances.test.js). When the
 * window opens again is said in this process's own time, in which the runner waits (gates.ts, as for its breakers):
 * the database's time as this process knows it, less how far its own clock is off.
 */
export async function takeStarts(appid: string | undefined, queue: string, limit: RateLimitSettings, wanted: number): Promise<Taken> {
  const row = await locked(appid, queue, ['rateWindow'])
  const offset = clock.now() - Date.now()
  const taken = take(row?.rateWindow as string | undefined, limit, wanted, clock.span())
  if (taken.granted > 0) await UPDATE(CONTROLS).set({ rateWindow: taken.window }).where(key(appid, queue))
  return taken.opensAt === undefined ? taken : { ...taken, opensAt: taken.opensAt - offset }
}

/** Pauses `queue` (an earlier pause stands, with its time and user); its controls afterwards. */
export async function pause(appid: string | undefined, queue: string, by: string, now: number): Promise<QueueControl> {
  const row = await locked(appid, queue, COLUMNS)
  if (row.pausedAt) return controlOf(row)
  await UPDATE(CONTROLS).set({ pausedAt: iso(now), pausedBy: by }).where(key(appid, queue))
  return controlOf({ ...row, pausedAt: iso(now), pausedBy: by })
}

/**
 * Lifts a pause of `queue` and closes its circuit breaker, recorded as a change `by` an operator at `now` (so every
 * instance takes it over, see CircuitBreaker.adopt); its controls before and after.
 */
export async function resume(appid: string | undefined, queue: string, by: string, now: number): Promise<{ before: QueueControl; after: QueueControl }> {
  const row = await locked(appid, queue, COLUMNS)
  const after = { queue, pausedAt: null, pausedBy: null, breaker: null, breakerUntil: null, breakerBy: by, breakerAt: iso(now) }
  await UPDATE(CONTROLS).set(after).where(key(appid, queue))
  return { before: controlOf(row), after: controlOf(after) }
}

/** Records a change of `queue`'s circuit breaker made by instance `by` (see runner/breaker.ts). */
export async function writeBreaker(appid: string | undefined, queue: string, breaker: SharedBreaker): Promise<void> {
  await locked(appid, queue, ['queue'])
  const state = breaker.state === 'closed' ? null : breaker.state
  const at = (ms: number | undefined) => (ms === undefined ? null : iso(ms))
  await UPDATE(CONTROLS).set({ breaker: state, breakerUntil: at(breaker.until), breakerBy: breaker.by ?? null, breakerAt: at(breaker.at) }).where(key(appid, queue))
}
