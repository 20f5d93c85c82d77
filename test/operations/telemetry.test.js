const otel = require('@opentelemetry/api')
const { spans, scrape, points } = require('../support/telemetry')
const { startApp } = require('../support/app')
const { MESSAGES, capRow } = require('../support/outbox')
const { monitor } = require('../support/monitor')
const { waitFor } = require('../support/wait')
const { eventQueues } = require('../../lib/plugin')
const cds = require('@sap/cds')

// The statistics behind the gauges are read once an hour here: every scrape of this suite reuses the first one.
startApp({ requires: { queue: { statisticsInterval: '1h' } } })

const tracer = otel.trace.getTracer('test')
const { SpanKind, SpanStatusCode } = otel

const finished = name => spans.getFinishedSpans().filter(s => s.name === name)
const parentOf = span => span.parentSpanContext?.spanId

/** Runs `fn` in a span, as an HTTP request's span is active while CAP handles it; resolves to the span. */
function inSpan(name, fn) {
  return tracer.startActiveSpan(name, async span => {
    await fn()
    span.end()
    return span
  })
}

const iso = ms => new Date(ms).toISOString()

/** A row of queue `target` in a given state, written as an operator script or another runner would. */
function row(target, state) {
  const base = { ...capRow({ event: 'gauged', target }), attempts: 0 }
  return { ...base, ...state }
}

describe('metrics', () => {
  test('the gauges report each queue by state and its relay lag from one statistics query, whatever the number of scrapes', async () => {
    const { runner, settings } = eventQueues()
    const queries = jest.spyOn(runner.store, 'queueStatistics')
    const now = Date.now()
    const later = iso(now + 3_600_000)
    await INSERT.into(MESSAGES).entries([
      // waiting for its next attempt since two minutes: pending, and the queue's relay lag
      row('gauges', { timestamp: iso(now - 120_000), dueAt: later, attempts: 1, lastAttemptTimestamp: iso(now - 60_000) }),
      // delayed by an hour: pending, but not late
      row('gauges', { timestamp: later, dueAt: later }),
      // held by another process
      row('gauges', { status: 'processing', claimedBy: 'another process', claimedAt: iso(now), lastAttemptTimestamp: iso(now), dueAt: later }),
      // a dead letter
      row('gauges', { attempts: 10, dueAt: null, lastAttemptTimestamp: iso(now) })
    ])

    const metrics = await scrape()
    await scrape()
    await scrape()
    expect(queries).toHaveBeenCalledTimes(1)
    queries.mockRestore()

    const gauge = state => points(metrics, 'cds_event_queues.messages', { 'messaging.destination.name': 'gauges', 'cds_event_queues.message.state': state })
    expect(gauge('pending').map(p => p.value)).toEqual([2])
    expect(gauge('processing').map(p => p.value)).toEqual([1])
    expect(gauge('dead').map(p => p.value)).toEqual([1])
    const [lag] = points(metrics, 'cds_event_queues.relay_lag', { 'messaging.destination.name': 'gauges' })
    expect(lag.value).toBeGreaterThanOrEqual(120)
    expect(lag.value).toBeLessThan(150)
    expect(lag.attributes).toEqual({ 'messaging.system': 'cds_event_queues', 'messaging.destination.name': 'gauges' })

    // the same numbers as the operator service's statistics(), which counts with other queries
    const { OperatorQueries } = require('../../lib/ops/queries')
    const statistics = await cds.tx(() => new OperatorQueries(settings.queues, settings.appid).statistics())
    const operator = statistics.filter(s => s.queue === 'gauges').reduce((sum, s) => ({
      pending: sum.pending + s.pending, processing: sum.processing + s.processing, dead: sum.dead + s.dead, relayLag: Math.max(sum.relayLag, s.relayLag)
    }), { pending: 0, processing: 0, dead: 0, relayLag: 0 })
    expect({ ...operator, relayLag: operator.relayLag >= 120 }).toEqual({ pending: 2, processing: 1, dead: 1, relayLag: true })
    await DELETE.from(MESSAGES)
  })

  test('a message parked behind the running head of its ordering key is pending, and its wait counts for the relay lag', async () => {
    const { PARKED_AT } = require('../../lib/store/rules')
    const { runner, settings } = eventQueues()
    const now = Date.now()
    const later = iso(now + 3_600_000)
    await INSERT.into(MESSAGES).entries([
      // the key's head, running in another process
      row('parked', { orderingKey: 'booking-1', timestamp: iso(now - 600_000), status: 'processing', claimedBy: 'another process', claimedAt: iso(now), lastAttemptTimestamp: iso(now), dueAt: later }),
      // enqueued five minutes ago, waiting for the head: out of the claim's range, but not delayed
      row('parked', { orderingKey: 'booking-1', timestamp: iso(now - 300_000), dueAt: PARKED_AT })
    ])
    const [snapshot] = (await cds.tx(() => runner.store.queueStatistics(settings.queues.attemptLimits(), Date.now()))).filter(q => q.queue === 'parked')
    expect(snapshot).toMatchObject({ pending: 1, processing: 1, dead: 0 })
    expect(snapshot.relayLag).toBeGreaterThanOrEqual(300)
    expect(snapshot.relayLag).toBeLessThan(330)
    await DELETE.from(MESSAGES)
  })

  test('a queue statistics sample is reused within its interval, shared while it runs, and read again after it', async () => {
    const { QueueStatistics } = require('../../lib/ops/statistics')
    let now = 0
    let queries = 0
    const statistics = new QueueStatistics(async () => [{ queue: 'q', pending: ++queries, processing: 0, dead: 0, relayLag: 0 }], 1000, () => now)
    const [a, b] = await Promise.all([statistics.current(), statistics.current()])
    now = 999
    const c = await statistics.current()
    now = 1000
    const d = await statistics.current()
    expect([a, b, c, d].map(s => s.queues[0].pending)).toEqual([1, 1, 1, 2])
    expect(d.at).toBe(1000)
  })

  test('sent, consumed and the processing time are counted per queue, with error.type for failed attempts', async () => {
    const own = await cds.connect.to('OwnQueue')
    let calls = 0
    cds.unqueued(own).on('counted', req => {
      if (req.data.fail && ++calls === 1) throw Object.assign(new Error('flights are down'), { code: 'FLIGHTS_DOWN' })
    })
    const succeeded = []
    const count = e => e.target === 'OwnQueue' && e.kind === 'succeeded' && succeeded.push(e.ID)
    monitor().on('outcome', count)
    await cds.tx(async () => {
      await own.emit('counted', { fail: true })
      await own.emit('counted', { n: 1 })
      await own.emit('counted', { n: 2 })
    })
    await waitFor(() => succeeded.length === 3, { timeout: 20000, what: 'three processed messages, one after a retry' })
    monitor().off('outcome', count)

    const metrics = await scrape()
    const of = (name, attributes) => points(metrics, name, { 'messaging.destination.name': 'OwnQueue', 'messaging.system': 'cds_event_queues', ...attributes })
    expect(of('messaging.client.sent.messages', { 'messaging.operation.name': 'send', 'messaging.operation.type': 'send' }).map(p => p.value)).toEqual([3])
    expect(of('messaging.client.consumed.messages', { 'messaging.operation.name': 'process', 'messaging.operation.type': 'process' }).map(p => p.value)).toEqual([4])
    const durations = of('messaging.process.duration', { 'messaging.operation.name': 'process' })
    const failedAttempts = durations.filter(p => p.attributes['error.type'] === 'FLIGHTS_DOWN')
    const succeededAttempts = durations.filter(p => !('error.type' in p.attributes))
    expect(failedAttempts.map(p => p.value.count)).toEqual([1])
    expect(succeededAttempts.map(p => p.value.count)).toEqual([3])
    expect(succeededAttempts[0].value.sum).toBeGreaterThan(0)
    expect(metrics.find(m => m.descriptor.name === 'messaging.process.duration').descriptor.unit).toBe('s')
  })
})

describe('traces', () => {
  beforeEach(() => spans.reset())

  test('one trace: the request, its enqueue (send, PRODUCER), the handler (process, CONSUMER) and what the handler calls', async () => {
    const srv = await cds.connect.to('Target')
    let seenByHandler
    srv.on('traced', req => {
      seenByHandler = req
      tracer.startActiveSpan('remote call', { kind: SpanKind.CLIENT }, span => span.end())
    })
    const processed = monitor().next('outcome', e => e.kind === 'succeeded')
    let stored
    const request = await inSpan('POST /bookings', () => cds.tx(async () => {
      await cds.queued(srv).emit('traced', { n: 1 }, { 'x-app': 'header' })
      stored = JSON.parse((await SELECT.one.from(MESSAGES).columns('msg').where({ event: 'traced' })).msg)
    }))
    const { ID } = await processed

    const [send] = finished('send queue')
    const [process] = finished('process queue')
    const [remote] = finished('remote call')
    const trace = request.spanContext().traceId
    expect([send, process, remote].map(s => s.spanContext().traceId)).toEqual([trace, trace, trace])
    expect(parentOf(send)).toBe(request.spanContext().spanId)
    expect(parentOf(process)).toBe(send.spanContext().spanId)
    expect(parentOf(remote)).toBe(process.spanContext().spanId)
    expect(send.kind).toBe(SpanKind.PRODUCER)
    expect(process.kind).toBe(SpanKind.CONSUMER)
    expect(send.attributes).toEqual({
      'messaging.system': 'cds_event_queues', 'messaging.destination.name': 'queue',
      'messaging.operation.name': 'send', 'messaging.operation.type': 'send'
    })
    expect(process.attributes).toEqual({
      'messaging.system': 'cds_event_queues', 'messaging.destination.name': 'queue',
      'messaging.operation.name': 'process', 'messaging.operation.type': 'process', 'messaging.message.id': ID
    })

    // the row keeps CAP's format, with the enqueue's W3C trace context beside it; the handler's request is unchanged
    const { spanId, traceFlags } = send.spanContext()
    expect(stored.traceContext).toEqual({ traceparent: `00-${trace}-${spanId}-0${traceFlags}` })
    expect(stored).toMatchObject({ service: 'Target', event: 'traced', data: { n: 1 }, headers: { 'x-app': 'header' } })
    expect(seenByHandler.traceContext).toBeUndefined()
    expect(seenByHandler.headers).toEqual({ 'x-app': 'header' })
  })

  test('every attempt of a message is a child of its enqueue; a failed one records its error', async () => {
    const srv = await cds.connect.to('Target')
    let attempts = 0
    srv.on('flaky', () => {
      if (++attempts === 1) throw Object.assign(new Error('the remote system is down'), { code: 'REMOTE_DOWN' })
    })
    const processed = monitor().next('outcome', e => e.kind === 'succeeded', 20000)
    await inSpan('POST /flaky', () => cds.tx(() => cds.queued(srv).emit('flaky', {})))
    await processed

    const [send] = finished('send queue')
    const attemptSpans = finished('process queue')
    expect(attemptSpans.map(parentOf)).toEqual([send.spanContext().spanId, send.spanContext().spanId])
    const [first, second] = attemptSpans
    expect(first.status.code).toBe(SpanStatusCode.ERROR)
    expect(first.attributes['error.type']).toBe('REMOTE_DOWN')
    expect(first.events.map(e => e.name)).toEqual(['exception'])
    expect(second.status.code).toBe(SpanStatusCode.UNSET)
    expect(second.attributes['error.type']).toBeUndefined()
  })

  test('a message written by CAP\'s own queue (no trace context) runs in a trace of its own, not in the one that woke the runner', async () => {
    const srv = await cds.connect.to('Target')
    srv.on('fromCap', () => {})
    const processed = monitor().next('outcome', e => e.kind === 'succeeded')
    const unrelated = await inSpan('unrelated request', async () => {
      await INSERT.into(MESSAGES).entries(capRow({ event: 'fromCap' }))
      eventQueues().runner.wake()
    })
    await processed
    const [process] = finished('process queue')
    expect(parentOf(process)).toBeUndefined()
    expect(process.spanContext().traceId).not.toBe(unrelated.spanContext().traceId)
  })
})
