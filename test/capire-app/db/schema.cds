namespace sap.capire.bookshop;

entity Books {
  key ID     : Integer;
      title  : String;
      stock  : Integer;
}

/** What the app's handlers record: which queued calls and events arrived, once each. */
entity Notes {
  key ID      : UUID;
      kind    : String;
      message : String;
}
