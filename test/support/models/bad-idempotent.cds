// A service with an invalid @idempotent annotation (an action takes true only), for the start's one-line error.
service BadlyAnnotated {
  @idempotent: 'yes' action book();
}
