using { flights } from '../db/flights';

/** Stands in for a remote flights system, served in-process so the example needs nothing else. */
service FlightsService {
  @readonly entity Flights as projection on flights.Flights;

  action reserveSeats(flight : String, seats : Integer, booking : UUID) returns {
    booking      : UUID;
    confirmation : String;
  };

  /** Switches a simulated outage of seat reservations on or off. */
  action simulateOutage(failing : Boolean) returns Boolean;
}
