namespace cds.outbox;

/**
 * CAP's queue table, column for column, so rows written by CAP's built-in queue are processed as they are,
 * plus the columns the claim protocol needs.
 */
entity Messages {
  key ID                   : UUID;
      timestamp            : Timestamp;
      target               : String;
      msg                  : LargeString;
      attempts             : Integer default 0;
      partition            : Integer default 0;
      lastError            : LargeString;
      lastAttemptTimestamp : Timestamp;
      status               : String(23);
      task                 : String(255);
      appid                : String(255);
      // When the row may be claimed next; while claimed, when the lease expires; null for a dead letter.
      // The default makes rows written by CAP's built-in queue claimable without a migration.
      dueAt                : Timestamp default $now;
      claimedBy            : String(255);
      claimedAt            : Timestamp;
      // Messages with the same key run one at a time, in `timestamp` order; null = unordered. Not CAP's `partition`:
      // keys are entity IDs (strings), an Integer would need a hash whose collisions make unrelated keys wait, and
      // CAP's rows carry partition 0, which would put all of them under one key.
      orderingKey          : String(255);
}
