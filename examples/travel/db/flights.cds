namespace flights;

/** The simulated remote system's own data (in a real landscape, another application's database). */
entity Flights {
  key ID          : String(10);
      origin      : String(3);
      destination : String(3);
      freeSeats   : Integer;
}
