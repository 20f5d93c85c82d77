using { travel } from '../db/schema';

service TravelService {
  entity Bookings                as projection on travel.Bookings;
  @readonly entity Flights       as projection on travel.Flights;
  @readonly entity Notifications as projection on travel.Notifications;
}
