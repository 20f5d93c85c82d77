namespace chaos;

/*
 * What the checker reads back. Every row is written in the transaction named: an intent with its enqueue, an effect
 * and a callback in the handler's own transaction, a tick in the scheduled task's. Times are epoch milliseconds of
 * the true clock (`performance`), which a skewed process clock does not move.
 */

/** A message the workload asked for, written in the enqueuing transaction: it exists if and only if that committed. */
entity Intents {
  key wid          : String(60);
      service      : String(60);
      orderingKey  : String(255);
      /** The queue row's ID and `timestamp` (keyed and held messages and events only: they decide order and claims). */
      messageID    : String(36);
      timestamp    : String(40);
      pid          : Integer;
      at           : Double;
}

/** A handler's local effect: committed with the deletion of its message, so exactly one per message that succeeded. */
entity Effects {
  key ID        : UUID;
      wid       : String(60);
      messageID : String(36);
      attempt   : Integer;
      pid       : Integer;
      at        : Double;
}

/** A `#succeeded` or `#failed` callback's local effect. */
entity Callbacks {
  key ID        : UUID;
      wid       : String(60);
      kind      : String(20);
      pid       : Integer;
      at        : Double;
}

/** A run of a scheduled task, committed with the move to its next occurrence. */
entity Ticks {
  key ID        : UUID;
      task      : String(60);
      version   : Integer;
      messageID : String(36);
      pid       : Integer;
      startedAt : Double;
      at        : Double;
}
