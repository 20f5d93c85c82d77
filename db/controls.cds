namespace cds.outbox;

/**
 * What holds a queue back across all instances on one database (see docs/REMOTE-SYSTEMS.md): an
 * operator's pause, the state of its circuit breaker, and the window of its rate limit. A row per queue that has
 * any of them, written in short transactions of their own, never in an application's; a multitenant app has one
 * table per tenant database, so each tenant's queue is paused, limited and broken apart.
 */
entity QueueControls {
  // CAP's `appid` ('' for none): apps sharing a database control their queues apart
  key appid        : String(255);
  // the queue: the `target` of its messages
  key queue        : String(255);
      // set while an operator has paused the queue: when, and who (the user id, or the CLI's user and host)
      pausedAt     : Timestamp;
      pausedBy     : String(255);
      // the circuit breaker: null (closed), 'open' (until `breakerUntil`, then a probe runs) or 'probing'; who changed it
      // last (an instance's `claimedBy` name) and when
      breaker      : String(10);
      breakerUntil : Timestamp;
      breakerBy    : String(255);
      breakerAt    : Timestamp;
      // the rateLimit's starts of the last `per`, in buckets of a hundredth of it (JSON, see lib/controls/rate-window.ts)
      rateWindow   : LargeString;
}
