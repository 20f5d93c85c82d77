import { invalid } from '../errors'

const UNIT_MS: Record<string, number> = {
  ms: 1, millisecond: 1, milliseconds: 1,
  s: 1000, sec: 1000, secs: 1000, second: 1000, seconds: 1000,
  m: 60_000, min: 60_000, mins: 60_000, minute: 60_000, minutes: 60_000,
  h: 3_600_000, hr: 3_600_000, hrs: 3_600_000, hour: 3_600_000, hours: 3_600_000,
  d: 86_400_000, day: 86_400_000, days: 86_400_000,
  w: 604_800_000, week: 604_800_000, weeks: 604_800_000
}

export const DURATION_FORMS =
  "a number of milliseconds >= 0, or a string like '500ms', '1s', '10m', '1.5h', '2d', '1w', '10 minutes' or '1h30m'"

const PART = /(\d+(?:\.\d+)?|\.\d+)\s*([a-z]+)\s*/gy
const WHOLE = /^\s*(?:(?:\d+(?:\.\d+)?|\.\d+)\s*[a-z]+\s*)+$/

/**
 * Parses a duration into milliseconds. Unlike CAP's built-in parser, '1.5h' is 90 minutes (not 1 ms) and
 * anything unrecognised is an error instead of a silent zero.
 */
export function parseDuration(value: unknown, what: string): number {
  if (typeof value === 'number') {
    if (Number.isFinite(value) && value >= 0) return value
    throw invalid(what, value, DURATION_FORMS)
  }
  if (typeof value !== 'string') throw invalid(what, value, DURATION_FORMS)
  const text = value.trim().toLowerCase()
  if (/^\d+(\.\d+)?$/.test(text)) return Number(text)
  if (!WHOLE.test(text)) throw invalid(what, value, DURATION_FORMS)
  let total = 0
  PART.lastIndex = 0
  for (let match = PART.exec(text); match; match = PART.exec(text)) {
    const unit = UNIT_MS[match[2]]
    if (unit === undefined) throw invalid(what, value, DURATION_FORMS)
    total += Number(match[1]) * unit
  }
  return Math.round(total)
}
