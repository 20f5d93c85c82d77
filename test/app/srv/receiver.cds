using { test } from '../db/schema';

/**
 * A service receiving calls of other apps, its operations marked `@idempotent`: a repeated `Idempotency-Key` gets
 * the recorded response (the consumer half). Handlers are registered by the suites and instances that use it.
 */
service Receiver {
  @idempotent
  entity Bookings as projection on test.Records actions {
    @idempotent
    action confirm(note : String) returns String;
  };

  @idempotent
  action book(flight : String, seats : Integer) returns {
    ID    : UUID;
    seats : Integer;
  };

  @idempotent
  action hold(flight : String) returns String;

  action unmarked(flight : String) returns String;
}
