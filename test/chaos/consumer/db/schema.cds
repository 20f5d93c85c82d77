namespace consumer;

/*
 * What the checker reads back of the consumer. Times are epoch milliseconds of the true clock (`performance`).
 */

/** An event the subscriber applied, written in the inbox's transaction of that event: one per event applied. */
entity Applied {
  key eventID  : String(36);
      wid      : String(60);
      topic    : String(60);
      orderKey : String(255);
      sequence : Integer;
      /** The highest sequence number of the key applied before this one (null: none). */
      previous : Integer;
      pid      : Integer;
      at       : Double;
}

/** A credit booked by the @idempotent action, in the request's transaction. */
entity Credits {
  key ID       : UUID;
      ref      : String(60);
      account  : String(60);
      amount   : Integer;
      pid      : Integer;
      at       : Double;
}
