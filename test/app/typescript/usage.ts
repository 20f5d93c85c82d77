// Compiled by test/types.test.js with `tsc --noEmit`: the public API must type-check as users write it.
import cds, { flush } from '@sap/cds'
import type { ConsumerServiceOptions, EventQueues, HealthStatus, QueueMessageInfo, ScheduleBuilder } from 'cds-event-queues'
import { expectIdempotent, expectQueued, messages, outcome, queuedBy, duplicateDeliveries, type OutcomeKind, type QueuedMessage } from 'cds-event-queues/test'

export async function usage(): Promise<void> {
  const { queued, unqueued } = cds as typeof cds & EventQueues
  const srv = await cds.connect.to('Target')
  const qd = queued(srv, { maxAttempts: 3, timeout: '10m', backoff: { base: '1s', jitter: 0.2 } })
  await qd.emit('ping', { n: 1 })
  const max: number = qd.queued.maxAttempts
  void max
  const kept: number | undefined = queued(srv, { deadLetterRetention: '30d' }).queued.deadLetterRetention
  void kept
  const health = await queued.health({ maxLag: '5m', timeout: 2000 })
  const status: HealthStatus = health.status
  const lag: number | null | undefined = health.checks.lag?.relayLag
  void status, lag
  const same: typeof srv = unqueued(qd)
  void same
  await flush()
  await (cds as typeof cds & EventQueues).flush()
  const removed: number = await srv.unschedule('replicate')
  void removed
  const builder = srv.schedule('replicate', { entity: 'Airports' }) as unknown as ScheduleBuilder
  await builder.every('10m').as('replicate-airports').after('1h')
  srv.on('ping', req => {
    const info = (req as unknown as { queue: QueueMessageInfo }).queue
    const sequence: number | undefined = info.sequence
    void sequence, info.receipt?.ID
    return info.messageId
  })
  const receipts: number = queued(srv, { receiptRetention: '2d' }).queued.receiptRetention
  void receipts
  const remote: ConsumerServiceOptions = { idempotencyKey: 'X-Request-ID', inboxed: { messageId: ['headers.x-event-id', 'data.ID'] } }
  void remote
}

/** The test helpers, as an app's own tests use them. */
export async function testing(): Promise<void> {
  const srv = await cds.connect.to('Target')
  const queued: QueuedMessage[] = await queuedBy(() => srv.send('act', { value: 'x' }))
  const due: Date | null = queued[0].dueAt
  void due
  const pending: QueuedMessage[] = await messages({ service: 'Target', event: 'act' })
  void pending
  await expectQueued(() => srv.send('act', { value: 'y' }), [{ service: 'Target', event: 'noted', data: { text: 'y' } }], { rollback: true })
  const kind: OutcomeKind = (await outcome(queued[0], { kind: ['succeeded', 'retried'], timeout: 5000 })).kind
  void kind
  const { delivered, failures } = duplicateDeliveries()
  void delivered, failures.map(f => f.event)
  expectIdempotent()
}
