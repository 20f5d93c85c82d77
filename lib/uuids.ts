import { createHash } from 'crypto'

/** SHA-256 of `input` as a UUID of `version` (RFC 9562 layout): the same input always gives the same UUID. */
export function uuidOf(input: string, version: 4 | 8): string {
  const hash = createHash('sha256').update(input).digest()
  hash[6] = (version << 4) | (hash[6] & 0x0f)
  hash[8] = 0x80 | (hash[8] & 0x3f) // RFC variant
  const hex = hash.toString('hex', 0, 16)
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`
}
