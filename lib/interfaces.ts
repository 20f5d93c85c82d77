/**
 * Domain types shared across the runtime. The public input types (what users write in `cds.requires.queue` or pass
 * to `cds.queued`) are in index.d.ts; the types here are what configuration compiles them into.
 */

/** How long the next attempt waits: `min(max, base * (factor^attempts - 1))`, spread by up to `jitter` (0..1). */
export interface BackoffSettings {
  base: number
  factor: number
  max: number
  jitter: number
}

/** At most `count` messages of a queue start per `per` ms in one process. */
export interface RateLimitSettings {
  count: number
  per: number
}

/** After `failures` consecutive failed attempts a queue pauses; one message runs every `probeInterval` ms as a probe. */
export interface CircuitBreakerSettings {
  failures: number
  probeInterval: number
}

/** The compiled, validated settings of one queue. All durations are milliseconds. */
export interface QueueSettings {
  /** The queue's name: the `target` of its rows (`queue` for the default queue). */
  name: string
  /** Rows are written to the table; false: queued calls wait in memory for the commit and run once (CAP's in-memory queue). */
  persistent: boolean
  /** Attempts after which a message becomes a dead letter. */
  maxAttempts: number
  /** Lease of a claim: a message claimed longer ago than this is considered abandoned and is claimed again. */
  timeout: number
  /** How long one attempt may run in a live process; then its handler is abandoned and the message taken over. */
  handlerTimeout: number
  /** Largest `msg` (UTF-8 bytes) an enqueue may write; larger payloads fail at the call. */
  maxMessageSize: number
  backoff: BackoffSettings
  /** Keep the last error of a failed attempt in `lastError`. */
  storeLastError: boolean
  /** `lastError` is cut to this many characters. */
  maxErrorLength: number
  /** Accepted for compatibility with CAP's configuration; this queue's claims never hold locks while handlers run. */
  legacyLocking: boolean
  /** IANA time zone for the cron expressions of scheduled tasks; undefined = the process's time zone. */
  timezone: string | undefined
  /** Derives a message's ordering key from the request; undefined = messages are unordered unless a call sets one. */
  orderingKey: OrderingKeySource | undefined
  /** What the later messages of a key do when the key's head becomes a dead letter. */
  orderingOnDeadLetter: DeadLetterOrdering
  /** Handler slots of this queue in one process (never more than the runner's `concurrency`). */
  concurrency: number
  /** Which headers of this queue's calls are never stored (from `secretHeaders` and `keepHeaders`, see secrets.ts). */
  secretHeader: HeaderRule
  rateLimit: RateLimitSettings | undefined
  circuitBreaker: CircuitBreakerSettings | undefined
  /** How long a dead letter is kept after its last attempt before the retention deletes it; undefined = kept. */
  deadLetterRetention: number | undefined
  /** How long the ID of an inbound message this queue processed is kept for deduplication (see lib/receipts). */
  receiptRetention: number
}

/** Whether a header of a queued call carries a credential, so that it is not stored. */
export type HeaderRule = (name: string, value: unknown) => boolean

/** Derives an ordering key from a request about to be queued; `undefined` or `null` = unordered. */
export type OrderingKeySource = (req: { event?: string; data?: unknown; headers?: Record<string, unknown> }) => unknown

/**
 * `continue`: the dead letter leaves its key and the later messages run. `block`: the key waits until the dead letter
 * is revived (it runs first) or deleted.
 */
export type DeadLetterOrdering = 'continue' | 'block'

/** Settings of the runner as a whole (from `cds.requires.queue`). */
export interface RunnerSettings {
  /** How often the table is checked for due messages written by other processes (ms). */
  pollInterval: number
  /** How long `cds.shutdown` waits for running handlers (ms). */
  shutdownGrace: number
  /** Handlers one process runs at the same time (slots; a slot runs one message or a batch, one after another). */
  concurrency: number
  /** How many messages one claim takes at most. */
  chunkSize: number
  /**
   * Most bytes of stored messages (`msg`) one process holds claimed at once, in its slots: a claim takes rows while
   * their sizes add up to what is left of it, and at least one while anything is left.
   */
  maxClaimBytes: number
  /**
   * Most messages of a backlog one slot takes from a claim, run one after another in one transaction, a savepoint
   * around each; 1 = a transaction per message. A claim is spread over the free slots first.
   */
  batchSize: number
  /**
   * How long the queue statistics behind the metrics' gauges and the health check's lag are reused (ms): one
   * statistics query per interval, however often they are read.
   */
  statisticsInterval: number
  /** Which store runs the queue's statements (see lib/store/choose.ts). */
  store: StoreChoice
  /** `twice`: the test mode that delivers every message a second time once its first delivery committed (runner/redelivery.ts). */
  deliver: DeliveryMode
}

/** How often the runner delivers a message: `once`, or `twice` in an app's tests, to show its handlers are idempotent. */
export type DeliveryMode = 'once' | 'twice'

/** Where an inbound message's ID is: a header (case-insensitive), or a path into its data. */
export interface MessageIdSource {
  in: 'headers' | 'data'
  path: string[]
}

/** What the consumer half needs of the services' configuration (see lib/receipts, lib/wire.ts). */
export interface ReceiverSettings {
  /** Inboxed messaging services by name: where their messages' IDs are; false: they deduplicate nothing. */
  inboxes: Map<string, MessageIdSource[] | false>
  /** Services whose queued calls carry their message ID as a header (`idempotencyKey`): that header's name. */
  idempotencyKeys: Map<string, string>
}

/** A dead letter the retention deleted, as an operator reads it in the log. */
export interface DeletedMessage {
  ID: string
  target: string
  service: string | null
  event: string | null
}

/** One queue's messages at one moment, as one statistics query counted them. */
export interface QueueSnapshot {
  queue: string
  pending: number
  processing: number
  dead: number
  /** Seconds the queue's oldest due message had been waiting. */
  relayLag: number
  /** An operator paused the queue (its lag is expected). */
  paused?: boolean
  /** Its circuit breaker's state; null or undefined: it has none. */
  breaker?: 'closed' | 'open' | 'probing' | null
}

/**
 * `native`: the raw-SQL store of SQLite and PostgreSQL (savepoint batches, LISTEN/NOTIFY); `portable`: CQL only, for
 * every database CAP runs on; `auto`: native where the database has it, else portable.
 */
export type StoreChoice = 'auto' | 'native' | 'portable'

/** A row of `cds.outbox.Messages`, as the store reads it. Timestamps are epoch milliseconds. */
export interface MessageRow {
  ID: string
  timestamp: number
  target: string
  msg: string
  attempts: number
  lastError: string | null
  task: string | null
  appid: string | null
  claimedAt: number
  /** How often a claim of the row was lost with its process (see the claim in lib/store/statements.ts): it runs alone. */
  interrupted: number
  /** A row from before CAP had `appid` whose `msg` names no service: the service its target names. */
  serviceOfOldRow?: string
  /** Its ordering key: when it is done, the next message of the key becomes due. */
  orderingKey?: string | null
  /** Its number in its key's sequence (lib/store/sequences.ts); null where the row has none (its `msg` may). */
  sequence?: number | null
}

/** The claim a process holds on a row; outcomes are only written while it still holds it. */
export interface Claim {
  ID: string
  claimedBy: string
  claimedAt: number
  /** The row's ordering key, where it has one: completing the row makes the next message of the key due. */
  orderingKey?: string | null
}

/** What decides a row's fate as a transaction reads it: CAP's columns and the claim (epoch ms; NaN for null). */
export interface RowState {
  ID: string
  status: string | null
  attempts: number
  lastError: string | null
  lastAttemptTimestamp: number
  timestamp: number
  claimedBy: string | null
  claimedAt: number
}

/** A row to be written. */
export interface NewMessage {
  ID: string
  /** CAP's 100-ns ISO timestamp: enqueue order, and the due time of delayed messages. */
  timestamp: string
  target: string
  msg: string
  task?: string
  dueAt: Date
  /** Messages with the same key run one at a time, in `timestamp` order. */
  orderingKey?: string
  /** The service and event of `msg`, for operators (index columns, see db/outbox.cds). */
  service?: string
  event?: string
}

/** What a message written as a dead letter at once carries (an inbound message its inbox refused). */
export interface DeadOnArrival {
  /** At least its queue's `maxAttempts`, so that it is a dead letter by CAP's rule. */
  attempts: number
  /** Why it was refused (as `lastError` stores an error), or null where the queue stores no errors. */
  lastError: string | null
  /** When it was refused (epoch ms): its `lastAttemptTimestamp`. */
  at: number
}

/** The event context fields that are persisted: an allow-list, so credentials never reach the table. */
export interface StoredContext {
  id?: string
  tenant?: string
  locale?: string
  features?: Record<string, boolean>
}

/** Scheduling information of a message, as CAP stores it in `msg.queue`. */
export interface QueueInfo {
  task?: string
  after?: number
  every?: number | string
  /** The plugin's: the sequence number of the message's ordering key (1 for the key's first message). */
  sequence?: number
  /** The plugin's: the receipt of an inbound message, marked processed in its subscriber's transaction. */
  receipt?: ReceiptRef
  [key: string]: unknown
}

/** A row of `cds.outbox.Receipts` (db/consumer.cds): what a receiver recorded of a message or request. */
export interface ReceiptRef {
  scope: string
  ID: string
}

/**
 * The W3C trace context (https://www.w3.org/TR/trace-context/) of the span that enqueued a message: its handler's
 * span continues that trace. Not a secret: it identifies a trace, it grants nothing.
 */
export interface TraceContext {
  traceparent: string
  tracestate?: string
}

/** The JSON in `cds.outbox.Messages.msg`; the same shape CAP's built-in queue writes. */
export interface StoredMessage {
  'cds.internal.user'?: string
  service?: string
  context?: StoredContext
  _fromSend?: boolean
  event?: string
  data?: unknown
  headers?: Record<string, unknown>
  queue?: QueueInfo
  query?: unknown
  method?: string
  path?: string
  params?: unknown
  entity?: string
  inbound?: unknown
  results?: unknown
  /** The plugin's addition: CAP's runner ignores it (it becomes an unused property of the event it dispatches). */
  traceContext?: TraceContext
  /** The plugin's addition: the header the message's ID goes out in (a remote service's `idempotencyKey`). */
  idempotencyKey?: string
  [key: string]: unknown
}

/** What an attempt came to. */
export type Outcome =
  /**
   * `answeredAt`: when the broker accepted a relayed message (lib/runner/relay.ts), which may be well before its outcome
   * is settled (after its batch's completion): a success that is no news of the broker since a wait began.
   */
  | { kind: 'succeeded'; answeredAt?: number }
  /**
   * `retryAfter`: the delay is what the error's Retry-After asked for, not the backoff; `dueAt`: it named an instant,
   * which is the next attempt's due time (else it is `delay` after the recorded attempt).
   */
  | { kind: 'retry'; error: unknown; attempts: number; delay: number; retryAfter?: boolean; dueAt?: Date }
  /** `silent`: it was a dead letter before this attempt (someone else set its attempts): no `#failed` callback. */
  | { kind: 'dead'; error: unknown; attempts: number; silent?: boolean }
  /** Back to the queue without an attempt counted; `alone`: it must run alone next time (see runner/batch-connections.ts). */
  | { kind: 'deferred'; dueAt: Date; alone?: boolean }
  /** `beforeStart`: a task's occurrence whose task was unscheduled or re-scheduled after the claim; it did not run. */
  | { kind: 'lost'; beforeStart?: boolean }
  /**
   * Its handler did not finish within `handlerTimeout` and may still run: no longer renewed, the message is taken
   * over once its lease expires, and that takeover counts the attempt.
   */
  | { kind: 'abandoned' }
  /**
   * Its messaging service's broker was unavailable (lib/runner/broker-waits.ts): back to the queue, due at `dueAt`,
   * without an attempt charged; `since`: when this process began to wait for that broker.
   */
  | { kind: 'waiting'; service: string; error: unknown; since: number; dueAt: Date }

/** The compiled options of a messaging service of kind `redis-streams` (lib/messaging). Durations in ms. */
export interface RedisStreamsSettings {
  /** `credentials.uri` or `.url`, with the password in it: never logged (log `endpoint`). */
  url: string
  /** `host:port` of `url`, for log lines and errors. */
  endpoint: string
  /** The consumer group: one per app, all its instances share the stream's entries. */
  group: string
  /** This process's name in the group. */
  consumer: string
  /** How each XADD bounds its stream (approximately): by entry count, or by age. */
  trim: { maxLength: number } | { maxAge: number }
  /** Entries another consumer received and has not acknowledged for this long are claimed (XAUTOCLAIM). */
  claimAfter: number
  /** How long a command may go unanswered (beyond its own blocking time) before Redis counts as unavailable. */
  commandTimeout: number
}

/** Whether a messaging service's broker is reachable now, and a call when it is again (for the relay that waits). */
export interface BrokerAvailability {
  readonly available: boolean
  /** Calls `listener` each time the broker becomes available again; returns the function that stops it. */
  onAvailable(listener: () => void): () => void
}

/**
 * A relay's wait for its broker (lib/runner/broker-waits.ts) as the operator surfaces show it: which service, since
 * when (epoch ms), how many events (the last count).
 */
export interface BrokerWait {
  service: string
  since: number
  events: number | undefined
  /** The first error that said so (its first line). */
  reason: string
  /** Begun by the circuit breaker: failures that did not say the broker was away. */
  suspected: boolean
}
