namespace test;

/** What queued handlers write, so tests can see which effects committed. */
entity Records {
  key ID      : UUID;
      kind    : String(100);
      message : String(100);
      note    : String(5000);
}
