import type { Claim, DeadOnArrival, MessageRow, NewMessage, RowState } from '../interfaces'
import { initialSequence } from './sequences'

/** Decoding rows as the drivers return them. */

/** Epoch ms of a timestamp read through `Dialect.isoText` (ISO, or SQLite's 'YYYY-MM-DD HH:MM:SS' from a default). */
export function millis(value: unknown): number {
  if (typeof value !== 'string') return NaN
  const iso = /[zZ]|[+-]\d\d:?\d\d$/.test(value) ? value : value.replace(' ', 'T') + 'Z'
  return Date.parse(iso)
}

export function iso(date: Date | number): string {
  return new Date(date).toISOString()
}

/** A claimed row as the claim's read-back returns it. */
export interface RawRow extends Omit<MessageRow, 'timestamp' | 'claimedAt' | 'interrupted' | 'sequence'> {
  timestamp: unknown
  claimedAt: unknown
  interrupted: unknown
  orderingKey: string | null
  /** An Integer64: a string from pg. */
  sequence: unknown
  keyLocked?: unknown
}

export function messageRow({ keyLocked: _l, ...r }: RawRow): MessageRow {
  const sequence = r.sequence === null || r.sequence === undefined ? null : Number(r.sequence)
  return { ...r, attempts: Number(r.attempts ?? 0), interrupted: Number(r.interrupted ?? 0), timestamp: millis(r.timestamp), claimedAt: millis(r.claimedAt), sequence }
}

/**
 * A new row as CQL writes it, in CAP's shape: no `attempts` (the column's default), as CAP's queue inserts it, so
 * handlers on the table count it as new. `claim` writes it already claimed until `leaseUntil`.
 */
export function newRow(message: NewMessage, appid: string | null, claim?: Claim, leaseUntil?: number): Record<string, unknown> {
  const { ID, timestamp, target, msg, task, dueAt, orderingKey, service, event } = message
  const row: Record<string, unknown> = {
    ID, timestamp, target, msg, task: task ?? null, appid, dueAt: iso(dueAt), orderingKey: orderingKey ?? null,
    service: service ?? null, event: event ?? null, sequence: initialSequence(orderingKey)
  }
  if (!claim) return row
  return { ...row, status: 'processing', claimedBy: claim.claimedBy, claimedAt: iso(claim.claimedAt), lastAttemptTimestamp: iso(claim.claimedAt), dueAt: iso(leaseUntil ?? claim.claimedAt) }
}

/** A new row that is a dead letter from the start: no due time (no claim takes it), as a dead letter's outcome leaves one. */
export function deadLetterRow(message: NewMessage, appid: string | null, dead: DeadOnArrival): Record<string, unknown> {
  return { ...newRow({ ...message, orderingKey: undefined }, appid), attempts: dead.attempts, lastError: dead.lastError, lastAttemptTimestamp: iso(dead.at), dueAt: null }
}

/** The ordering keys among `keys`, each once (rows without one have none to promote). */
export function distinctKeys(keys: (string | null | undefined)[]): string[] {
  return [...new Set(keys.filter((k): k is string => typeof k === 'string'))]
}

/** A `RowState` from a row as either store reads it (timestamps as ISO text). */
export function rowState(raw: Record<string, unknown>): RowState {
  return {
    ID: raw.ID as string,
    status: (raw.status as string | null) ?? null,
    attempts: Number(raw.attempts ?? 0),
    lastError: (raw.lastError as string | null) ?? null,
    lastAttemptTimestamp: millis(raw.lastAttemptTimestamp),
    timestamp: millis(raw.timestamp),
    claimedBy: (raw.claimedBy as string | null) ?? null,
    claimedAt: millis(raw.claimedAt)
  }
}
