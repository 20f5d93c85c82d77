import { AssertionError } from 'assert'
import cds from '@sap/cds'
import { committedSince, present, queuedSince, whileOnHold, type QueuedMessage, type TenantOption } from './messages'

/**
 * The outbox pattern's test of a state transition: the transition queues exactly its events, in its own transaction,
 * and nothing if that transaction rolls back.
 */

/** What a test expects of a queued message: each property given must match; `data` and `headers` may give a part. */
export interface ExpectedMessage {
  queue?: string
  service?: string
  event?: string
  data?: unknown
  headers?: Record<string, unknown>
  key?: string
  task?: string
}

export interface TransitionOptions extends TenantOption {
  /** Rolls the transaction back once `fn` is done, and expects nothing of it left in the table. */
  rollback?: boolean
  /** The user the transaction runs as (default: the user of `cds.context`, else CAP's default). */
  user?: cds.User
}

/** Whether `actual` has what `expected` gives: objects in part, arrays element by element, values exactly. */
function matches(actual: unknown, expected: unknown): boolean {
  if (expected === undefined) return true
  if (expected instanceof Date) return actual instanceof Date && actual.getTime() === expected.getTime()
  if (Array.isArray(expected)) return Array.isArray(actual) && actual.length === expected.length && expected.every((e, i) => matches(actual[i], e))
  if (expected !== null && typeof expected === 'object') {
    if (actual === null || typeof actual !== 'object') return false
    return Object.entries(expected).every(([key, value]) => matches((actual as Record<string, unknown>)[key], value))
  }
  return Object.is(actual, expected)
}

/** A message as an assertion shows it. */
function shown({ queue, service, event, data, key, task }: QueuedMessage): object {
  return { queue, service, event, data, ...(key !== undefined && { key }), ...(task !== undefined && { task }) }
}

const messagesCount = (n: number) => `${n} message${n === 1 ? '' : 's'}`

function fail(message: string, actual: unknown, expected: unknown): never {
  throw new AssertionError({ message, actual, expected, operator: 'expectQueued' })
}

/** A transaction that `expectQueued` rolls back on purpose. */
const ROLLED_BACK = Symbol('rolled back by expectQueued')

/**
 * Runs `fn` — a state transition — in a transaction of its own (`cds.tx`, handed to `fn`) and asserts that it queued
 * exactly the `expected` messages, in that order, in that transaction: read inside it before it commits, and
 * committed with it. With `rollback: true` the transaction is rolled back instead, and none of them may be left.
 * The runner is on hold meanwhile, so no message runs before it is read. Resolves to the messages queued.
 */
export function expectQueued(fn: (tx: unknown) => unknown, expected: ExpectedMessage | ExpectedMessage[], options: TransitionOptions = {}): Promise<QueuedMessage[]> {
  const wanted = Array.isArray(expected) ? expected : [expected]
  return whileOnHold(async () => {
    const tenant = options.tenant ?? cds.context?.tenant
    const before = await present(tenant)
    let inside: QueuedMessage[] = []
    // a transition that queued other messages fails inside its transaction: rolled back, it leaves nothing behind
    const transaction = cds.tx({ tenant, user: options.user ?? cds.context?.user }, async (tx: unknown) => {
      await fn(tx)
      inside = await queuedSince(before)
      if (inside.length !== wanted.length || !wanted.every((e, i) => matches(inside[i], e))) {
        fail(`expectQueued: the transaction queued ${messagesCount(inside.length)} where ${wanted.length} ${wanted.length === 1 ? 'was' : 'were'} expected, or others`, inside.map(shown), wanted)
      }
      if (options.rollback) throw ROLLED_BACK
    }) as unknown as Promise<void>
    await transaction.catch(e => {
      if (e !== ROLLED_BACK) throw e
    })
    const queued = inside.map(shown)
    const left = await committedSince(before, tenant)
    if (options.rollback) {
      if (left.length) fail(`expectQueued: ${messagesCount(left.length)} ${left.length === 1 ? 'is' : 'are'} left after the transaction rolled back`, left.map(shown), [])
      return inside
    }
    if (left.length !== inside.length || left.some((m, i) => m.ID !== inside[i].ID)) {
      fail('expectQueued: the messages committed are not those queued in the transaction', left.map(shown), queued)
    }
    return left
  })
}
