/** The exit codes of `cds-event-queues`, which scripts can rely on (documented in docs/OPERATIONS.md#the-cli and in `--help`). */
export const EXIT = {
  OK: 0,
  /** Something failed that is not the caller's input: the database is unreachable, a statement failed. */
  FAILED: 1,
  /** The command line or the project's configuration is invalid; nothing was changed. */
  USAGE: 2,
  /** Some given IDs are not dead letters (no such message, or it is still retried); the others were handled. */
  NOT_DEAD: 3,
  /** `status` with `--max-lag` / `--max-dead`: a threshold was exceeded. */
  THRESHOLD: 4
} as const
