namespace cds.outbox;

/**
 * What receivers record (the consumer half, docs/CONSUMER.md): the IDs of inbound messages an inboxed messaging service
 * received (`scope` 'inbox:<service>'), and the idempotency keys and responses of requests to operations marked
 * `@idempotent` (`scope` 'action:<service>.<operation>'). One table and one pruner for both: a row is written in
 * the transaction of the receiver's own writes and deleted in small batches once `expiresAt` has passed.
 */
@assert.unique.expiry: [expiresAt, scope, ID] // the pruner's index (CDS declares no other); it includes the key
entity Receipts {
  // prefixed with `<appid>|` where the app has an appid, so apps sharing a database keep their receipts apart
  key scope       : String(255);
  // the message ID (CloudEvents `id`, or what `inboxed.messageId` names) or the Idempotency-Key
  key ID          : String(255);
      // 'received': an inbound message in the inbox, not processed yet; 'done': processed (an operation's response
      // recorded). Only 'done' rows expire.
      state       : String(10);
      // operations: a SHA-256 of the request (operation, target keys, payload, user), to tell a retry from a reuse
      fingerprint : String(64);
      // operations: the recorded result, as JSON
      response    : LargeString;
      // redeliveries of the same ID that were dropped
      duplicates  : Integer default 0;
      recordedAt  : Timestamp;
      // when the pruner may delete the row; null while the message waits in the inbox
      expiresAt   : Timestamp;
}

/**
 * The last sequence number issued to each ordering key (issue 23, item 6): incremented by the claim that first takes a
 * message of the key, in the runner's transaction, which stores the number with the message (`sequence` of
 * cds.outbox.Messages): a key's messages are claimed one at a time, in their order, so its numbers follow the order
 * they run in; a rolled-back enqueue never reaches a claim, and the numbers have no gaps. Never in an application's
 * transaction, whose locks it would join (issue 31: two transfers queueing for two keys in opposite order deadlocked).
 * Never pruned: a key's numbers never start over while its row exists.
 */
entity KeySequences {
  // CAP's `appid` ('' for none): apps sharing a database number their keys apart
  key appid       : String(255);
  key orderingKey : String(255);
      issued      : Integer64 default 0;
}
