namespace mt;

/** What the queued handler did, written in the tenant's own database. */
entity Done {
  key ID     : UUID;
      tenant : String;
      seq    : Integer;
}
