import { invalid } from '../errors'
import type { DeliveryMode, RunnerSettings, StoreChoice } from '../interfaces'
import { duration, integer, type Raw } from './values'

/** The options of the runner as a whole: only in `cds.requires.queue`. */

/**
 * 32 MiB: what a process holds of claimed messages at once (`maxClaimBytes`). A message costs the heap more than its
 * size while it runs (the row, the decoded message, the handler's request): with this bound a backlog of 1.5 MB
 * messages drains in a 512 MB heap (test/faults/memory.test.js), and a backlog of ordinary events (kilobytes) never
 * reaches it.
 */
const DEFAULT_MAX_CLAIM_BYTES = 32 * 1024 * 1024

export const STORE_CHOICES: StoreChoice[] = ['auto', 'native', 'portable']

function storeChoice(raw: Raw, where: string): StoreChoice {
  const value = raw.store ?? 'auto'
  if (STORE_CHOICES.includes(value as StoreChoice)) return value as StoreChoice
  throw invalid(`${where}.store`, value, STORE_CHOICES.map(v => `'${v}'`).join(', ').replace(/, ([^,]*)$/, ' or $1'))
}

const DELIVERY_MODES: DeliveryMode[] = ['once', 'twice']

function deliveryMode(raw: Raw, where: string): DeliveryMode {
  const value = raw.deliver ?? 'once'
  if (DELIVERY_MODES.includes(value as DeliveryMode)) return value as DeliveryMode
  throw invalid(`${where}.deliver`, value, `'once', or 'twice' in tests (every message delivered a second time)`)
}

export function compileRunner(raw: Raw): RunnerSettings {
  const where = 'cds.requires.queue'
  return {
    pollInterval: duration(raw, 'pollInterval', where, '5s', 1),
    shutdownGrace: duration(raw, 'shutdownGrace', where, '10s'),
    concurrency: integer(raw, 'concurrency', where, 10, 1, 1000),
    chunkSize: integer(raw, 'chunkSize', where, 500, 1, 10000),
    maxClaimBytes: integer(raw, 'maxClaimBytes', where, DEFAULT_MAX_CLAIM_BYTES, 1024),
    batchSize: integer(raw, 'batchSize', where, 50, 1, 1000),
    statisticsInterval: duration(raw, 'statisticsInterval', where, '30s', 1000),
    store: storeChoice(raw, where),
    deliver: deliveryMode(raw, where)
  }
}
