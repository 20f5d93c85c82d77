using { cds.outbox.Messages } from '../db/outbox';

/**
 * Operations on the event queue: dead letters with CAP's `revive` and `delete`, bulk actions, pending messages and
 * statistics. Named apart from CAP's dead letter queue recipe (`OutboxDeadLetterQueueService`), so an app that copied
 * the recipe serves both. Served automatically (`cds.requires.dead-letter-queue`), restricted to `internal-user`
 * unless `cds.requires.dead-letter-queue.roles` says otherwise.
 */
@requires: 'internal-user'
service EventQueuesService {

  /** Messages whose attempts reached the `maxAttempts` of their own queue; they are not retried any more. */
  @readonly
  entity DeadOutboxMessages     as
    projection on Messages {
      ID,
      timestamp,
      target,
      service,
      event,
      task,
      attempts,
      lastError,
      lastAttemptTimestamp,
      msg,
      appid
    }
    actions {
      /** Resets the attempts and processes the message right away; `lastError` stays until the next attempt. */
      action revive();
      action delete();
    };

  /** Messages waiting to be processed (`status = 'processing'` while a process holds them). */
  @readonly
  entity PendingOutboxMessages  as
    projection on Messages {
      ID,
      timestamp as waitingSince,
      target,
      service,
      event,
      task,
      attempts,
      dueAt,
      status,
      claimedBy,
      lastError,
      lastAttemptTimestamp,
      msg,
      appid
    };

  /**
   * Counts per queue, service and event; `relayLag` is how long the oldest undelivered message has waited, in seconds;
   * `duplicates` the redeliveries an inboxed service dropped (on its row with `event` null), over the receipts kept.
   * The queue's controls on each of its rows: whether an operator paused it (a paused queue's lag is expected), and
   * its circuit breaker (null: it has none; 'closed', 'open' until `breakerUntil`, or 'probing').
   */
  type QueueStatistics {
    queue               : String;
    service             : String;
    event               : String;
    pending             : Integer;
    processing          : Integer;
    dead                : Integer;
    oldestPendingSince  : Timestamp;
    relayLag            : Integer;
    duplicates          : Integer;
    paused              : Boolean;
    pausedBy            : String;
    pausedAt            : Timestamp;
    breaker             : String;
    breakerUntil        : Timestamp;
    /** Since when its `pending` events wait for their messaging service's broker, uncharged (null: they do not). */
    brokerWaitingSince  : Timestamp;
  }

  /** A queue's controls after `pause` or `resume`. */
  type QueueControl {
    queue        : String;
    paused       : Boolean;
    pausedBy     : String;
    pausedAt     : Timestamp;
    breaker      : String;
    breakerUntil : Timestamp;
  }

  /** One queue at one moment of the last hour, sampled by the serving process (the ops page's lag chart). */
  type LagSample {
    at         : Timestamp;
    queue      : String;
    pending    : Integer;
    processing : Integer;
    dead       : Integer;
    relayLag   : Integer;
  }

  function statistics()                                                                       returns many QueueStatistics;
  /** The last hour of `statistics()` per queue, oldest first, ending with a sample taken now. */
  function lagHistory()                                                                       returns many LagSample;
  /** Revives every dead letter matching all given filters; `olderThan` is a duration such as '1h' or '2d'. */
  action   reviveAll(queue : String, service : String, event : String, olderThan : String) returns Integer;
  action   deleteAll(queue : String, service : String, event : String, olderThan : String) returns Integer;
  /**
   * Pauses a queue in every instance, until `resume`: its messages stay in the table, unclaimed and not attempted;
   * handlers already running finish. Recorded with the caller's user id.
   */
  action   pause(queue : String)                                                             returns QueueControl;
  /** Lifts a pause and closes the queue's circuit breaker: its messages run again, in every instance. */
  action   resume(queue : String)                                                            returns QueueControl;
}
