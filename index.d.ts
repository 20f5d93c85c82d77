/**
 * Public API types of cds-event-queues. `@cap-js/cds-types` types CAP's queue API without options, without
 * `.as()`, `srv.unschedule()` and `cds.flush()`; this file adds them. Where cds-types declares a member in a form
 * that cannot be widened by augmentation (`cds.queued` is a const), import the typed API from here:
 *
 *   import cds from '@sap/cds'
 *   import type { EventQueues } from 'cds-event-queues'
 *   const { queued } = cds as typeof cds & EventQueues
 */
import type { Service } from '@sap/cds'

/** Milliseconds, or a string like '500ms', '10s', '10m', '1.5h', '2d', '1w', '10 minutes', '1h30m'. */
export type Duration = number | string

/** Five-field cron (minute hour day month weekday), six fields with leading seconds, or a macro like '@hourly'. */
export type Cron = string

export interface BackoffOptions {
  /** Default 1000 ms (CAP's curve: base * (factor^attempts - 1)). */
  base?: Duration
  /** Default 1.5. */
  factor?: number
  /** Upper bound of one wait, default 1,480,000 ms (CAP's cap). */
  max?: Duration
  /** Random spread 0..1 around the computed wait, default 0. */
  jitter?: number
}

/** Options of a queue: `cds.requires.queue`, a named queue, `outboxed: {…}`, or `cds.queued(srv, options)`. */
export interface QueueOptions {
  /** Attempts before a message becomes a dead letter. Default 10. */
  maxAttempts?: number
  /** Lease of a claim: after this a claimed message counts as abandoned and is claimed again. Default '1h'. */
  timeout?: Duration
  backoff?: BackoffOptions
  /** Keep the error of the last failed attempt in `lastError`. Default true. */
  storeLastError?: boolean
  /** `lastError` is cut to this many characters. Default 4000. */
  maxErrorLength?: number
  /** IANA time zone for cron schedules. Default: the process's. */
  timezone?: string
  /** Accepted for compatibility with CAP's configuration; it changes nothing here. */
  legacyLocking?: boolean
}

/** What a queued handler finds in `req.queue`. */
export interface QueueMessageInfo {
  /** The row ID: stable across all retries of the message; use it to deduplicate. */
  messageId: string
  /** 1 on the first attempt. */
  attempt: number
  /** Set for scheduled tasks. */
  task?: string
  every?: number | string
  after?: number
}

/** A queued proxy of a service: `emit`, `send`, `run` persist the call and resolve to `undefined`. */
export type QueuedService<S extends Service = Service> = S & {
  /** The effective options of the service's queue. */
  readonly queued: Required<Omit<QueueOptions, 'timezone'>> & Pick<QueueOptions, 'timezone'>
  readonly outboxed: QueuedService<S>['queued']
  flush(): Promise<void>
}

/**
 * The builder `srv.schedule(...)` returns. It does nothing until awaited; awaiting it upserts the task in the
 * current transaction.
 */
export interface ScheduleBuilder extends PromiseLike<void> {
  /** Delay the first run. */
  after(delay: Duration, unit?: string): ScheduleBuilder
  /** Repeat: an interval counted from the end of the previous successful run, or a cron expression. */
  every(interval: Duration | Cron, unit?: string): ScheduleBuilder
  /** The task's name (default: the event name): tasks are singletons per service and name. */
  as(name: string): ScheduleBuilder
}

export interface EventQueues {
  queued<S extends Service>(srv: S, options?: QueueOptions): QueuedService<S>
  outboxed<S extends Service>(srv: S, options?: QueueOptions): QueuedService<S>
  unqueued<S extends Service>(srv: S | QueuedService<S>): S
  unboxed<S extends Service>(srv: S | QueuedService<S>): S
  /** Processes every processable message until none is left; never rejects for handler failures. */
  flush(): Promise<void>
}

declare module '@sap/cds' {
  /** `import { flush } from '@sap/cds'`. Processes every processable message until none is left; never rejects for handler failures. */
  export const flush: () => Promise<void>

  interface Service {
    /** Removes a scheduled task; resolves to the number of tasks removed (0 for unknown names). */
    unschedule(task: string): Promise<number>
  }
}
