import { AssertionError } from 'assert'
import cds from '@sap/cds'
import { errorLine } from '../failures'
import type { Outcome } from '../interfaces'
import { eventQueues } from '../plugin'
import type { Monitor, RunnerEvents } from '../runner/monitor'
import type { DuplicateDeliveries, Redelivery } from '../runner/redelivery'

/**
 * What became of messages, for tests to await instead of sleeping: every outcome the runner records in this process
 * from when the app is served, so an outcome that came before the test asked for it is found too.
 */

/** What an attempt of a message came to. */
export type OutcomeKind = 'succeeded' | 'retried' | 'dead'

export interface MessageOutcome {
  ID: string
  queue: string
  kind: OutcomeKind
}

export interface OutcomeOptions {
  /** The outcomes to wait for (default: `succeeded` or `dead`, i.e. until the message is done). */
  kind?: OutcomeKind | OutcomeKind[]
  /** How long to wait, in ms (default 10 s); then it rejects, naming the message and its outcomes so far. */
  timeout?: number
}

const KINDS: Partial<Record<Outcome['kind'], OutcomeKind>> = { succeeded: 'succeeded', retry: 'retried', dead: 'dead' }

/** A test run records the outcomes of this many messages at most, the latest. */
const KEPT = 10_000

interface Waiter {
  ID: string
  kinds: OutcomeKind[]
  resolve(outcome: MessageOutcome): void
}

/** The outcomes the runner of this process recorded, by message, and who waits for one. */
class History {
  private readonly seen = new Map<string, MessageOutcome[]>()
  private readonly waiters = new Set<Waiter>()

  constructor(readonly monitor: Monitor) {
    monitor.on('outcome', ({ ID, target, kind }: RunnerEvents['outcome']) => {
      const known = KINDS[kind]
      if (known) this.record({ ID, queue: target, kind: known })
    })
  }

  private record(outcome: MessageOutcome): void {
    const list = this.seen.get(outcome.ID) ?? []
    if (!list.length && this.seen.size >= KEPT) this.seen.delete(this.seen.keys().next().value as string)
    this.seen.set(outcome.ID, [...list, outcome])
    for (const waiter of this.waiters) {
      if (waiter.ID !== outcome.ID || !waiter.kinds.includes(outcome.kind)) continue
      this.waiters.delete(waiter)
      waiter.resolve(outcome)
    }
  }

  outcomes(ID: string): MessageOutcome[] {
    return this.seen.get(ID) ?? []
  }

  wait(ID: string, kinds: OutcomeKind[], timeout: number): Promise<MessageOutcome> {
    const found = this.outcomes(ID).find(o => kinds.includes(o.kind))
    if (found) return Promise.resolve(found)
    return new Promise((resolve, reject) => {
      const waiter: Waiter = { ID, kinds, resolve: outcome => (clearTimeout(timer), resolve(outcome)) }
      const timer = setTimeout(() => {
        this.waiters.delete(waiter)
        const soFar = this.outcomes(ID).map(o => o.kind).join(', ') || 'none'
        reject(new Error(`No outcome ${kinds.join(' or ')} of message ${ID} within ${timeout} ms (its outcomes so far: ${soFar})`))
      }, timeout)
      this.waiters.add(waiter)
    })
  }
}

let history: History | undefined

/** The history of this process's runner, listening from now on if it did not yet. */
function historyOf(): History {
  const { monitor } = eventQueues().runner
  if (history?.monitor !== monitor) history = new History(monitor)
  return history
}

// Listening from the moment the app is served, before the runner starts: no outcome of the test run is missed.
cds.on('served', () => void historyOf())

/**
 * The first outcome of `message` among `kind` (default: `succeeded` or `dead`): one recorded already, or the next.
 * With `deliver: 'twice'` a success is recorded once its second delivery is done too.
 */
export function outcome(message: string | { ID: string }, options: OutcomeOptions = {}): Promise<MessageOutcome> {
  const ID = typeof message === 'string' ? message : message.ID
  const kinds = options.kind === undefined ? (['succeeded', 'dead'] as OutcomeKind[]) : [options.kind].flat()
  return historyOf().wait(ID, kinds, options.timeout ?? 10_000)
}

function redelivery(): Redelivery {
  const mode = eventQueues().runner.redelivery
  if (mode) return mode
  throw new Error("The duplicate-delivery test mode is off: set cds.requires.queue.deliver: 'twice' (in the [test] profile)")
}

/** What the duplicate-delivery test mode (`deliver: 'twice'`) did in this process: second deliveries, and failures. */
export function duplicateDeliveries(): DuplicateDeliveries {
  return redelivery().report()
}

const checked = new WeakMap<Redelivery, number>()

/**
 * Throws if a second delivery failed since the last call (`deliver: 'twice'`), naming each message and its error: in
 * an `afterEach`, every test shows the handlers it ran are idempotent.
 */
export function expectIdempotent(): void {
  const mode = redelivery()
  const { failed, failures } = mode.report()
  const count = failed - (checked.get(mode) ?? 0)
  checked.set(mode, failed)
  if (count === 0) return
  const lines = failures.slice(-count).map(f => `message ${f.ID} (${f.service} ${f.event}) failed on its second delivery: ${errorLine(f.error)}`)
  throw new AssertionError({ message: `${count} messages failed on their second delivery (deliver: 'twice'):\n${lines.join('\n')}`, actual: count, expected: 0, operator: 'expectIdempotent' })
}
