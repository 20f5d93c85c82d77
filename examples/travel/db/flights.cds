namespace flights;

/** The simulated remote system's own data (in a real landscape, another application's database). */
entity Flights {
  key ID          : String(10);
      origin      : String(3);
      destination : String(3);
      freeSeats   : Integer;
}

/** Seats reserved per booking: a booking's reservation that arrives again returns this one instead of reserving more. */
entity Reservations {
  key booking      : UUID;
      flight       : String(10);
      seats        : Integer;
      confirmation : String(40);
}
