using { test } from '../db/schema';

/** A served service whose handlers the suites register themselves. */
service Target {
  entity Records as projection on test.Records;
  action act(value : String) returns String;
}
