using { consumer } from '../db/schema';

/** The consumer's own API; the checker's driver calls `credit` as the producer's clients would, with Idempotency-Key. */
@requires: 'authenticated-user'
service ConsumerService {
  @readonly entity Applied as projection on consumer.Applied;
  /** Books a credit; a repeated Idempotency-Key gets the recorded answer instead of a second booking. */
  @idempotent
  action credit(ref : String(60), account : String(60), amount : Integer) returns {
    ID      : UUID;
    account : String(60);
    amount  : Integer;
  };
  /** `cds.flush()`: processes everything processable now (the inbox). */
  action flush();
}
