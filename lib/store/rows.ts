import type { MessageRow } from '../interfaces'

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
export interface RawRow extends Omit<MessageRow, 'timestamp' | 'claimedAt'> {
  timestamp: unknown
  claimedAt: unknown
  orderingKey: string | null
  keyLocked?: unknown
}

export function messageRow({ orderingKey: _k, keyLocked: _l, ...r }: RawRow): MessageRow {
  return { ...r, attempts: Number(r.attempts ?? 0), timestamp: millis(r.timestamp), claimedAt: millis(r.claimedAt) }
}
