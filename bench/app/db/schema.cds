namespace perf;

/** The business table: the baseline's plain INSERTs and what the writing handler stores. */
entity Records {
  key ID : UUID;
      n  : Integer;
}
