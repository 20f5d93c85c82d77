namespace travel;

/** A booking: created at once, confirmed when the flights service has reserved the seats. */
entity Bookings {
  key ID           : UUID;
      flight       : String(10);
      customer     : String(100);
      seats        : Integer default 1;
      status       : String(20) default 'requested'; // requested → confirmed | failed
      confirmation : String(40);
      createdAt    : Timestamp @cds.on.insert: $now;
}

/** Our replica of the flights service's flights, refreshed by a scheduled task. */
entity Flights {
  key ID           : String(10);
      origin       : String(3);
      destination  : String(3);
      freeSeats    : Integer;
      replicatedAt : Timestamp;
}

/** What the messaging subscriber received. */
entity Notifications {
  key ID         : UUID;
      event      : String(100);
      booking    : UUID;
      receivedAt : Timestamp @cds.on.insert: $now;
}
