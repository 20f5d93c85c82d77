using { mt } from '../db/schema';

/** The app's own service; `Work` (package.json) is the queued one whose handler writes `Done`. */
service Tenant {
  @readonly entity Done as projection on mt.Done;
  /** Queues `count` `record` messages in the caller's tenant, in the request's transaction. */
  action enqueue(count : Integer, first : Integer);
  /** Records `seq` as done in the caller's tenant; a repeated Idempotency-Key gets the recorded answer. */
  @idempotent
  action book(seq : Integer) returns String;
}
