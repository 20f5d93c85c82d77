import { createHash } from 'crypto'
import type { ReceiptRef } from '../interfaces'
import { ascending } from '../store/portable-queries'

/**
 * What receivers record, in `cds.outbox.Receipts` (db/consumer.cds): the IDs of inbound messages an inbox received
 * and the keys and responses of `@idempotent` operations. Every statement runs in the current transaction as CQL
 * (any database CAP runs on), so a receipt commits or rolls back with the receiver's own writes. The one that must
 * not fail when another transaction records the same receipt, the inbox's, is the store's (`QueueStore.receive`).
 */

export const RECEIPTS = 'cds.outbox.Receipts'

/** 'received': an inbound message waits in the inbox; 'done': processed, or an operation's response recorded. */
export type ReceiptState = 'received' | 'done'

/** What receipts are kept for: an inbox's message IDs, an operation's idempotency keys. */
export type ReceiverKind = 'inbox' | 'action'

/** `scope` and `ID` are String(255) key columns. */
const MAX_LENGTH = 255

/**
 * The scope of a receiver's receipts: `<kind>:<name>`, prefixed with `<appid>|` where apps share a database. A name
 * too long for the column keeps its start and a hash of the whole, so it stays unique and readable.
 */
export function scopeOf(kind: ReceiverKind, name: string, appid: string | undefined): string {
  const scope = `${appid ? `${appid}|` : ''}${kind}:${name}`
  if ([...scope].length <= MAX_LENGTH) return scope
  const hash = createHash('sha256').update(scope).digest('hex')
  return `${[...scope].slice(0, MAX_LENGTH - hash.length - 1).join('')}#${hash}`
}

/** Whether `ID` fits the key column (at most 255 characters, no NUL, which PostgreSQL cannot store). */
export function fitsKeyColumn(ID: string): boolean {
  return ID.length > 0 && !ID.includes('\u0000') && [...ID].length <= MAX_LENGTH
}

const iso = (ms: number) => new Date(ms).toISOString()

/** Marks an inbound message's receipt processed, kept for `retention` ms from now. */
export async function recordProcessed(receipt: ReceiptRef, now: number, retention: number): Promise<void> {
  await UPDATE(RECEIPTS).set({ state: 'done', expiresAt: iso(now + retention) }).where(receipt)
}

/** An operation's recorded request and response. */
export interface RecordedResponse {
  fingerprint: string | null
  response: string | null
}

export async function recordedResponse(receipt: ReceiptRef): Promise<RecordedResponse | undefined> {
  return (await SELECT.one.from(RECEIPTS).columns('fingerprint', 'response').where(receipt)) as RecordedResponse | undefined
}

/** Records an operation's response, kept for `retention` ms from now. */
export async function recordResponse(receipt: ReceiptRef, fingerprint: string, response: string, now: number, retention: number): Promise<void> {
  await INSERT.into(RECEIPTS).entries({ ...receipt, state: 'done', fingerprint, response, recordedAt: iso(now), expiresAt: iso(now + retention) })
}

const ref = (column: string) => ({ ref: [column] })
const val = (value: unknown) => ({ val: value })

/** Receipts ordered by the expiry index (expiresAt, scope, ID) up to and including `last`. */
function upTo(last: { expiresAt: unknown; scope: string; ID: string }): { xpr: unknown[] } {
  const sameScope = { xpr: [ref('scope'), '=', val(last.scope), 'and', ref('ID'), '<=', val(last.ID)] }
  const sameExpiry = { xpr: [ref('expiresAt'), '=', val(last.expiresAt), 'and', { xpr: [ref('scope'), '<', val(last.scope), 'or', sameScope] }] }
  return { xpr: [ref('expiresAt'), '<', val(last.expiresAt), 'or', sameExpiry] }
}

/**
 * Deletes at most `limit` receipts that expired before `now`, in the order of the expiry index (db/consumer.cds);
 * how many. The batch ends at its `limit`-th receipt, found through that index, so a batch is two index range
 * statements however large the table.
 */
export async function pruneExpired(now: number, limit: number): Promise<number> {
  const expired = { expiresAt: { '<': iso(now) } }
  const last = (await SELECT.one.from(RECEIPTS).columns('expiresAt', 'scope', 'ID').where(expired).orderBy(...ascending('expiresAt', 'scope', 'ID')).limit(1, limit - 1)) as
    | { expiresAt: unknown; scope: string; ID: string }
    | undefined
  // bounded by the batch's last expiry, so the index range read is the batch's, not every expired receipt's
  if (!last) return Number(await DELETE.from(RECEIPTS).where(expired))
  return Number(await DELETE.from(RECEIPTS).where({ expiresAt: { '<=': last.expiresAt } }).and(upTo(last)))
}

/** Dropped redeliveries per scope of `kind` of this app (`appid`), over the receipts kept. */
export async function duplicatesByScope(kind: ReceiverKind, appid: string | undefined): Promise<Map<string, number>> {
  const rows = (await SELECT.from(RECEIPTS)
    .columns('scope', 'sum(duplicates) as duplicates')
    .where({ scope: { like: `${scopeOf(kind, '', appid)}%` }, duplicates: { '>': 0 } })
    .groupBy('scope')) as { scope: string; duplicates: unknown }[]
  return new Map(rows.map(r => [r.scope, Number(r.duplicates)]))
}
