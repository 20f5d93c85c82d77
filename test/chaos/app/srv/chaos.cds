using { chaos } from '../db/schema';

/** What a queued message is asked to do: its handler reads `fail`, `mode`, `ms` and `pad` from its data. */
type Message {
  wid     : String(60);
  service : String(60);
  /** The ordering key (`orderingKey: 'orderKey'` of Orders and Ledger). */
  orderKey : String(255);
  /** `send` instead of `emit`. */
  send    : Boolean;
  /** Delay in ms (`queue.after`). */
  delay   : Integer;
  /** Attempts that fail before one succeeds. */
  fail    : Integer;
  /** 'ok' (default), 'unrecoverable', 'hang' (until its signal aborts), 'slow' (`ms` long). */
  mode    : String(20);
  ms      : Integer;
  /** The topic of an event published on the messaging service `broker` (its `service`), for the consumer app. */
  topic   : String(60);
  /** Characters of padding: the payload's size. */
  size    : Integer;
  /** CAP's columns written in the enqueuing transaction, as a script would: 'processing', claimed `heldAgo` ms ago. */
  heldAgo : Integer;
}

/** A row written into the queue table in CAP's own format (a bulk import, a script, another version). */
type ForeignRow {
  wid     : String(60);
  service : String(60);
  orderKey : String(255);
  fail    : Integer;
}

/** The app's own API; the workload driver calls it as clients of the app would. */
@requires: 'authenticated-user'
service ChaosService {
  @readonly entity Intents as projection on chaos.Intents;
  /** Queues `messages` in this request's transaction; `rollback` makes the transaction fail after queueing. */
  action enqueue(messages : many Message, rollback : Boolean);
  /** Schedules (or re-schedules) a recurring task of Ticker, named `task`. */
  action scheduleTask(task : String(60), every : String(20), version : Integer, ms : Integer);
  action unscheduleTask(task : String(60)) returns Integer;
  /** Writes rows in CAP's format with SQL, not through cds.queued (a bulk import, a script). */
  action importRows(rows : many ForeignRow);
  /** Writes the row CAP 9.9's built-in queue writes for `Ticker.schedule('tick').every(every)` (before the upgrade). */
  action importCapTask(task : String(60), every : Integer);
  /** `cds.flush()`: processes everything processable now. */
  action flush();
}
