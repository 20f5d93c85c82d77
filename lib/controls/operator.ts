import cds from '@sap/cds'
import { invalid, QueueError } from '../errors'
import type { QueueSettings } from '../interfaces'
import type { QueueRegistry } from '../queues'
import { dialectFor } from '../store/dialects'
import { iso } from '../store/rows'
import { ENTITY, ownRowsCqn } from '../store/rules'
import { pause, readControls, resume, type BreakerState, type QueueControl } from './table'
import { LOG } from '../log'

/**
 * What operators do with a queue's controls and see of them — the operator service, the ops page (through it) and
 * the CLI alike: pause and resume a queue, and its pause and circuit breaker beside its statistics.
 */

/** A queue's controls as `statistics()` shows them beside its counts. */
export interface ControlFields {
  paused: boolean
  pausedBy: string | null
  pausedAt: string | null
  /** null: the queue has no `circuitBreaker`. */
  breaker: BreakerState | null
  /** While open: when the next probe may run. */
  breakerUntil: string | null
}

/** Thrown for a queue name that names no queue: the operator service answers 404, the CLI exit code 2. */
export class UnknownQueue extends QueueError {
  constructor(readonly queue: string) {
    super(`There is no queue ${queue}: no queue of that name is configured and no message has it as its target.`, 'UNKNOWN_QUEUE')
  }
}

/** Tells the app's instances that a control row changed, on commit of the current transaction (PostgreSQL only). */
export async function announce(db: cds.DatabaseService): Promise<void> {
  const signal = dialectFor(db.kind).wakeUp?.controls.signal
  if (signal) await db.run(signal)
}

/** `queue`, if it names a queue: a configured one, or the target of messages of this app. */
async function checked(queues: QueueRegistry, appid: string | undefined, queue: unknown, action: string): Promise<string> {
  if (typeof queue !== 'string' || !queue || queue.length > 255) throw invalid(`queue of ${action}`, queue, 'the name of a queue (the target of its messages)')
  if (queues.knows(queue)) return queue
  const row = await SELECT.one.from(ENTITY).columns('ID').where({ target: queue }).and(ownRowsCqn(appid))
  if (!row) throw new UnknownQueue(queue)
  return queue
}

/** Pauses `queue` in the current transaction's database, for every instance; its controls afterwards. */
export async function pauseQueue(queues: QueueRegistry, appid: string | undefined, queue: unknown, by: string): Promise<QueueControl> {
  const name = await checked(queues, appid, queue, 'pause')
  const control = await pause(appid, name, by, Date.now())
  await announce(cds.db)
  if (control.pausedBy === by) LOG.info(`queue ${name} paused by ${by}: its messages stay in the table until it is resumed`)
  return control
}

/** Resumes `queue` (and closes its circuit breaker) for every instance; its controls before and after. */
export async function resumeQueue(queues: QueueRegistry, appid: string | undefined, queue: unknown, by: string): Promise<{ before: QueueControl; after: QueueControl }> {
  const name = await checked(queues, appid, queue, 'resume')
  const changed = await resume(appid, name, by, Date.now())
  await announce(cds.db)
  LOG.info(`queue ${name} resumed by ${by}: ${resumed(changed.before)}`)
  return changed
}

/** What a `resume` changed of a queue whose controls were `before`. */
export function resumed(before: QueueControl): string {
  const what = [before.pausedAt !== undefined && 'lifted its pause', before.breaker.state !== 'closed' && `closed its circuit breaker (${before.breaker.state})`]
  return what.filter(Boolean).join(' and ') || 'nothing to do, it was neither paused nor held by its circuit breaker'
}

/** The fields `statistics()` shows of `control` for a queue with `settings`. */
export function controlFields(control: QueueControl | undefined, settings: QueueSettings | undefined): ControlFields {
  const state = control?.breaker.state ?? 'closed'
  const breaker = settings?.circuitBreaker || state !== 'closed' ? state : null
  return {
    paused: control?.pausedAt !== undefined,
    pausedBy: control?.pausedBy ?? null,
    pausedAt: control?.pausedAt === undefined ? null : iso(control.pausedAt),
    breaker,
    breakerUntil: state === 'open' && control?.breaker.until !== undefined ? iso(control.breaker.until) : null
  }
}

/**
 * `rows` (per queue, or per queue, service and event) with their queue's controls, and a row (`blank`) for each queue
 * that is paused or held by its breaker while it has no messages: an operator must see it all the same.
 */
export async function withControls<T extends { queue: string }>(rows: T[], queues: QueueRegistry, appid: string | undefined, blank: (queue: string) => T): Promise<(T & ControlFields)[]> {
  const controls = new Map((await readControls(appid)).map(c => [c.queue, c]))
  const settings = (queue: string) => (queues.knows(queue) ? queues.forTarget(queue) : undefined)
  const shown = rows.map(row => ({ ...row, ...controlFields(controls.get(row.queue), settings(row.queue)) }))
  const present = new Set(rows.map(r => r.queue))
  for (const control of controls.values()) {
    const fields = controlFields(control, settings(control.queue))
    if (!present.has(control.queue) && (fields.paused || (fields.breaker && fields.breaker !== 'closed'))) shown.push({ ...blank(control.queue), ...fields })
  }
  return shown.sort((a, b) => a.queue.localeCompare(b.queue))
}
