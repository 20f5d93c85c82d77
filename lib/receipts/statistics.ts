import type { QueueRegistry } from '../queues'
import { duplicatesByScope, scopeOf } from './receipts'

/**
 * The inboxes' dropped redeliveries in the operator service's `statistics()`: per inboxed service, on a row of its
 * queue with `event` null, counted over the receipts still kept (`receiptRetention`).
 */

/** A row of `statistics()`, as far as this needs it. */
interface StatisticsRow {
  queue: string
  service: string | null
  event: string | null
}

export type WithDuplicates<T> = T & { duplicates: number }

/** `rows` with the duplicates of this app's inboxes: on the row of queue, service and event null, added where missing. */
export async function withDuplicates<T extends StatisticsRow>(rows: T[], queues: QueueRegistry, appid: string | undefined, empty: Omit<T, keyof StatisticsRow>): Promise<WithDuplicates<T>[]> {
  const prefix = scopeOf('inbox', '', appid)
  const result: WithDuplicates<T>[] = rows.map(row => ({ ...row, duplicates: 0 }))
  for (const [scope, duplicates] of await duplicatesByScope('inbox', appid)) {
    const service = scope.slice(prefix.length)
    const queue = queues.queueOfService(service).name
    const row = result.find(r => r.queue === queue && r.service === service && r.event === null)
    if (row) row.duplicates = duplicates
    else result.push({ ...empty, queue, service, event: null, duplicates } as WithDuplicates<T>)
  }
  return result
}
