import { nextFireTime } from './cron'
import type { QueueInfo } from '../interfaces'

/**
 * When a scheduled task runs, from its `msg.queue` (`after` in ms; `every` in ms or a cron string, as CAP stores it).
 * The time zone applies to cron only; undefined is the process's.
 */

/** The first run of a newly scheduled task: after its delay; a cron task at its first fire time after that. */
export function firstRun(queue: QueueInfo, now: number, timezone: string | undefined): number {
  const start = now + (typeof queue.after === 'number' ? queue.after : 0)
  return typeof queue.every === 'string' ? nextFireTime(queue.every, start, timezone, queue.task ?? '').getTime() : start
}

/**
 * The next run of a recurring task, counted from the end of the run that just succeeded: `every` later, or the
 * cron's next fire time. Undefined for a task that runs once.
 */
export function nextRun(queue: QueueInfo | undefined, finishedAt: number, timezone: string | undefined): Date | undefined {
  const every = queue?.every
  if (typeof every === 'string') return nextFireTime(every, finishedAt, timezone, queue?.task ?? '')
  if (typeof every === 'number' && every > 0) return new Date(finishedAt + every)
  return undefined
}
