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
  /** Lease of a claim, renewed while the handler runs: a claim not renewed for this long is taken over. Default '1h'. */
  timeout?: Duration
  /** How long one attempt may run; then its signal aborts and the message is taken over. Default '1h'. */
  handlerTimeout?: Duration
  /** Largest stored message in bytes; larger payloads fail at the call. Default 4194304 (4 MiB). */
  maxMessageSize?: number
  backoff?: BackoffOptions
  /** Keep the error of the last failed attempt in `lastError`. Default true. */
  storeLastError?: boolean
  /** `lastError` is cut to this many characters. Default 4000. */
  maxErrorLength?: number
  /** IANA time zone for cron schedules. Default: the process's. */
  timezone?: string
  /** Accepted for compatibility with CAP's configuration; it changes nothing here. */
  legacyLocking?: boolean
  /**
   * The ordering key of each message: a path into the event's data (`'ID'`, `'order.ID'`) or, given to
   * `cds.queued(srv, options)`, a function of the request. Messages with the same key run one at a time, in enqueue
   * order. A call's `x-ordering-key` header wins. Default: none (unordered).
   */
  orderingKey?: string | ((req: { event?: string; data?: any; headers?: Record<string, unknown> }) => string | number | undefined | null)
  /**
   * When the first message of a key becomes a dead letter: `'continue'` (default) runs the key's later messages;
   * `'block'` holds them until the dead letter is revived (it runs first) or deleted.
   */
  orderingOnDeadLetter?: 'continue' | 'block'
  /**
   * Handlers of this queue one process runs at the same time, within the runner's `concurrency`; each runs one
   * message, or a batch of a backlog one after another. Default 10.
   */
  concurrency?: number
  /**
   * Header names (case-insensitive, `*` for any characters) never stored, beyond those named like a credential
   * (`…-key` of an API, `…token`, `…secret`, `…session`, …) and those whose value is one. Default none.
   */
  secretHeaders?: string[]
  /** Header names the credential rule would drop that are safe to store (not `authorization`, cookies, CSRF). */
  keepHeaders?: string[]
  /**
   * At most `count` messages of this queue start per `per` (a duration), each in a slot of its own. Counted per
   * process: N instances start up to N × count. Default: no limit.
   */
  rateLimit?: { count: number; per: Duration }
  /**
   * After `failures` consecutive failed attempts the queue pauses in this process; every `probeInterval` one message
   * runs as a probe, and its success resumes the queue. Default: none.
   */
  circuitBreaker?: { failures: number; probeInterval: Duration }
  /**
   * How long a dead letter is kept after its last attempt; then it is deleted (in small batches, logged and
   * counted in the metrics). At least 1 s, e.g. `'30d'`. Default `false`: dead letters stay until an operator acts.
   */
  deadLetterRetention?: Duration | false
  /**
   * How long receivers keep what they recorded: an inbox on this queue the IDs of the inbound messages it processed;
   * in `cds.requires.queue`, `@idempotent` operations their keys and responses. At least 1 s. Default '7d'.
   */
  receiptRetention?: Duration
}

/**
 * The consumer half's options of a service in `cds.requires` (docs/CONSUMER.md), beside CAP's own.
 */
export interface ConsumerServiceOptions {
  /**
   * A messaging service's inbox (CAP's option): inbound messages go through the queue, and a redelivery of an ID
   * received before is dropped. `messageId`: where the ID is, `'headers.<name>'` or `'data.<path>'` (the first of a
   * list that has one); default CloudEvents' `id`, else `x-message-id`; `false`: no deduplication.
   */
  inboxed?: boolean | { messageId?: string | string[] | false }
  /** Queued calls of this (remote) service carry their message ID as `Idempotency-Key` (`true`) or the named header. */
  idempotencyKey?: boolean | string
}

/** What a queued handler finds in `req.queue`. */
export interface QueueMessageInfo {
  /** The row ID: stable across all retries of the message; use it to deduplicate. */
  messageId: string
  /** 1 on the first attempt. */
  attempt: number
  /**
   * Aborts on shutdown (after `shutdownGrace`), when the claim is lost to another instance, after `handlerTimeout`,
   * and when the message's tenant is unsubscribed; `signal.reason.code` is `'SHUTDOWN'`, `'LEASE_LOST'`,
   * `'HANDLER_TIMEOUT'` or `'UNSUBSCRIBED'`.
   */
  signal: AbortSignal
  /** Set for scheduled tasks. */
  task?: string
  every?: number | string
  after?: number
  /** For a message with an ordering key: its number in the key's sequence, from 1, without gaps in what committed. */
  sequence?: number
  /** For an inbound message of an inboxed service: its receipt in `cds.outbox.Receipts`, marked processed on commit. */
  receipt?: { scope: string; ID: string }
}

/** A queued proxy of a service: `emit`, `send`, `run` persist the call and resolve to `undefined`. */
export type QueuedService<S extends Service = Service> = S & {
  /** The effective options of the service's queue. */
  readonly queued: Required<Omit<QueueOptions, 'timezone' | 'orderingKey' | 'deadLetterRetention' | 'receiptRetention'>> & Pick<QueueOptions, 'timezone' | 'orderingKey'> & {
    /** In ms; undefined: dead letters are kept. */
    deadLetterRetention: number | undefined
    /** In ms. */
    receiptRetention: number
  }
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

/** Options of `cds.queued.health(options)`. */
export interface HealthOptions {
  /** DOWN when a queue's oldest due message has waited longer than this. Default: the lag is not checked. */
  maxLag?: Duration
  /** How long the database (and the statistics behind `maxLag`) may take to answer. Default '2s'. */
  timeout?: Duration
}

export type HealthStatus = 'UP' | 'DOWN'

/** The queue's readiness in this process: UP when every check is UP. Errors are named by their code only. */
export interface QueueHealth {
  status: HealthStatus
  /** None with `cds.requires.queue: false` (nothing is stored, nothing runs in the background). */
  checks: {
    /** The runner has started (once the app listens) and is not shutting down. */
    runner?: { status: HealthStatus }
    /**
     * The database answers a statement on the queue table within `timeout`; `latency` in ms. `error`: the failure's
     * code; 'TABLE_MISSING' with `reason` saying which table and where, when the app runs before `cds deploy`.
     */
    database?: { status: HealthStatus; latency?: number; error?: string; reason?: string }
    /** The runner's last claim succeeded; `failures`: claims failed in a row since `lastSucceededAt` (ISO). */
    claims?: { status: HealthStatus; lastSucceededAt: string | null; failures: number }
    /**
     * With `maxLag`: the largest relay lag of any queue an operator has not paused (seconds, as of `sampledAt`), which
     * queue, and the limit; `paused`: the paused queues, whose lag is expected and not checked.
     */
    lag?: { status: HealthStatus; relayLag: number | null; maxLag: number; queue: string | null; sampledAt: string | null; paused: string[]; error?: string }
    /**
     * While this process's relay waits for a messaging service's broker: which, since when (ISO), how many events
     * (the last count; null before the first), and whether its circuit breaker began the wait (`suspected`: failures
     * that did not say the broker was away). Always UP: the app and its queue work, the events wait in the table —
     * an app taken out of service for its broker helps nobody. `maxLag` is what alerts on a wait that lasts.
     */
    broker?: { status: 'UP'; waiting: { service: string; since: string; events: number | null; suspected: boolean }[] }
  }
}

/** `cds.queued` (and `cds.outboxed`): queues a service; `.health()` tells whether the queue works in this process. */
export interface Queued {
  <S extends Service>(srv: S, options?: QueueOptions): QueuedService<S>
  /** The queue's readiness, for the app's health or readiness endpoint (docs/OPERATIONS.md#health). */
  health(options?: HealthOptions): Promise<QueueHealth>
}

export interface EventQueues {
  queued: Queued
  outboxed: Queued
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
