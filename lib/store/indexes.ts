import { PARKED, TABLE } from './rules'
import { LOG } from '../log'
import { NUMBERED } from './sequences'

/**
 * The indexes the claim needs; without them it degrades with the table's size. Created by the runner at start, not
 * by `cds deploy`: CAP keeps the queue model out of `$sources` (no db/init.js beside it runs) and executes generated
 * DDL in no guaranteed order; starting covers every way a database gets deployed.
 */
const INDEXES: [name: string, definition: string][] = [
  ['cds_outbox_Messages_due', '(appid, dueAt)'],
  // PostgreSQL does not take `appid IS NULL` as an equality for the order of the index above: without this one,
  // every claim of an app without appid sorts the whole backlog (5 ms per claim at 10,000 rows instead of 0.1 ms).
  ['cds_outbox_Messages_due_noapp', '(dueAt) WHERE appid IS NULL'],
  // The claim reads its rows back by (claimedBy, claimedAt). Partial: only rows under a claim are in it.
  ['cds_outbox_Messages_claim', '(claimedBy, claimedAt) WHERE claimedBy IS NOT NULL'],
  // The claim's ordering-key checks. Partial: unordered rows are not in them, so they cost unordered messages nothing.
  ['cds_outbox_Messages_key', '(orderingKey, timestamp) WHERE orderingKey IS NOT NULL'],
  // A key's numbered rows, which come first in its order (see NUMBERED): none, or the one a claim took, per key.
  ['cds_outbox_Messages_key_numbered', `(orderingKey, sequence) WHERE ${NUMBERED}`],
  ['cds_outbox_Messages_key_claimed', "(orderingKey) WHERE orderingKey IS NOT NULL AND status = 'processing'"],
  // The reconciliation's look for keyed rows others wrote that must be parked: keyed rows not parked yet.
  ['cds_outbox_Messages_key_due', '(dueAt) WHERE orderingKey IS NOT NULL'],
  // The reconciliation's walk over the keys of parked messages (see PARKED): one probe per key, not per message.
  ['cds_outbox_Messages_parked', `(orderingKey) WHERE dueAt = ${PARKED}`],
  // The reconciliation's look for dead letters whose attempts fell below their queue's limit (a revive by CAP's
  // recipe): by attempts, among dead letters only, so thousands of them cost a range scan, not a read of each.
  ['cds_outbox_Messages_dead', '(attempts, target) WHERE dueAt IS NULL'],
  // The reconciliation's look for rows another runner holds ('processing' without a claim of this plugin): none,
  // or a handful during a rolling upgrade, whatever the size of the table.
  ['cds_outbox_Messages_foreign', '(lastAttemptTimestamp) WHERE status IS NOT NULL AND claimedBy IS NULL']
]

/** What creating the indexes needs: the names the catalog lists, and a statement runner. */
export interface IndexTarget {
  indexNames(): Promise<Set<string>>
  run(sql: string): Promise<unknown>
}

/**
 * Creates the indexes that are missing (idempotent). Existing ones are looked up first: on PostgreSQL even
 * `CREATE INDEX IF NOT EXISTS` waits for a lock that conflicts with every running claim and completion, so an
 * instance starting beside a busy one would sit there while the other drains.
 */
export async function ensureIndexes(target: IndexTarget): Promise<void> {
  const existing = await target.indexNames()
  for (const [name, definition] of INDEXES) {
    if (existing.has(name.toLowerCase())) continue
    try {
      await target.run(`CREATE INDEX IF NOT EXISTS ${name} ON ${TABLE} ${definition}`)
    } catch (e) {
      // Instances starting at the same moment race to create it; PostgreSQL fails the later ones with a duplicate.
      if (!(await target.indexNames()).has(name.toLowerCase())) LOG.warn(`could not create index ${name}; claims work without it, but slower:`, e)
    }
  }
}
