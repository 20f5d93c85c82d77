using { cds.outbox.Messages } from '../db/outbox';

/**
 * Operations on the event queue, under the names of CAP's dead letter queue recipe, so UIs and scripts written for
 * the recipe keep working. Served automatically (`cds.requires.dead-letter-queue`), restricted to `internal-user`
 * unless `cds.requires.dead-letter-queue.roles` says otherwise.
 */
@requires: 'internal-user'
service OutboxDeadLetterQueueService {

  /** Messages whose attempts reached the `maxAttempts` of their own queue; they are not retried any more. */
  @readonly
  entity DeadOutboxMessages     as
    projection on Messages {
      ID,
      timestamp,
      target,
      task,
      attempts,
      lastError,
      lastAttemptTimestamp,
      msg,
      appid
    }
    where
      dueAt is null
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
      task,
      attempts,
      dueAt,
      status,
      claimedBy,
      lastError,
      lastAttemptTimestamp,
      msg,
      appid
    }
    where
      dueAt is not null;

  /** Counts per queue; `relayLag` is how long the oldest undelivered message has been waiting, in seconds. */
  type QueueStatistics {
    queue               : String;
    pending             : Integer;
    processing          : Integer;
    dead                : Integer;
    oldestPendingSince  : Timestamp;
    relayLag            : Integer;
  }

  function statistics()                                                                       returns many QueueStatistics;
  /** Revives every dead letter matching all given filters; `olderThan` is a duration such as '1h' or '2d'. */
  action   reviveAll(queue : String, service : String, event : String, olderThan : String) returns Integer;
  action   deleteAll(queue : String, service : String, event : String, olderThan : String) returns Integer;
}
