using from '@sap/cds/srv/outbox';
// pauses, circuit breakers and rate windows shared by every instance (docs/REMOTE-SYSTEMS.md)
using from './controls';
// what receivers record, and the sequence numbers of ordering keys (the consumer half)
using from './consumer';

/**
 * CAP's own queue table (@sap/cds/srv/outbox), extended rather than redefined: an app that uses CAP's model as well
 * (`using from '@sap/cds/srv/outbox'`, as CAP's dead letter queue recipe does) compiles with the plugin, and CAP's
 * columns keep CAP's meaning. The columns added here are an index of CAP's columns for the claim, never a second
 * truth: whatever `status`, `attempts`, `lastAttemptTimestamp` or `timestamp` say decides (see lib/store/rules.ts).
 */
extend cds.outbox.Messages with {
  // When the row may be claimed next; while claimed, when the lease expires; null for a dead letter.
  // The default makes rows written by CAP's built-in queue claimable without a migration.
  dueAt       : Timestamp default $now;
  claimedBy   : String(255);
  claimedAt   : Timestamp;
  // How often a claim of the row ended with its process gone (the lease expired): a row interrupted before runs
  // alone, right after its claim, so only then does a lost claim count as an attempt (see lib/store/statements.ts).
  interrupted : Integer default 0;
  // Messages with the same key run one at a time, in `timestamp` order; null = unordered. Not CAP's `partition`:
  // keys are entity IDs (strings), an Integer would need a hash whose collisions make unrelated keys wait, and
  // CAP's rows carry partition 0, which would put all of them under one key.
  orderingKey : String(255);
  // A keyed message's number in its key's sequence (docs/CONSUMER.md), issued by the claim that first takes it, in the
  // runner's transaction: 0 until then; null for an unkeyed message, or one written before numbers were issued at the
  // claim (its number is in `msg`). Kept on retries and revivals.
  sequence    : Integer64;
  // The service and event of `msg`, so operators and statistics can tell messages apart (every `outboxed: true`
  // service shares the queue `queue`); filled in for rows written by others by the runner.
  service     : String(255);
  event       : String(255);
}
