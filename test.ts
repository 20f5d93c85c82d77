/**
 * `cds-event-queues/test`: what a CAP app's own tests (`cds.test`) need to assert queued work — the messages a request
 * queued, that a state transition queued its events in its own transaction (and nothing on rollback), what became of
 * a message, and with `deliver: 'twice'` whether its handlers are idempotent. Draining is CAP's `cds.flush()`.
 * docs/TESTING.md#test-helpers-cds-event-queuestest.
 */
export { messages, queuedBy, type MessageFilter, type QueuedMessage, type TenantOption } from './lib/testing/messages'
export { expectQueued, type ExpectedMessage, type TransitionOptions } from './lib/testing/transitions'
export { duplicateDeliveries, expectIdempotent, outcome, type MessageOutcome, type OutcomeKind, type OutcomeOptions } from './lib/testing/outcomes'
export type { DuplicateDeliveries, DuplicateFailure } from './lib/runner/redelivery'
