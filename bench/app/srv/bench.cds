using { perf } from '../db/schema';

/** The queued service; the bench registers its handlers (noop, write, ping). */
service Bench {
  entity Records as projection on perf.Records;
}
