import type { RateLimitSettings } from '../interfaces'
import type { Span } from '../time/clock'

/**
 * A queue's `rateLimit` window as every instance shares it (the `rateWindow` column of its control row): the starts of
 * the last `per` ms, counted in buckets of a hundredth of `per`. A bucket counts for the whole window that any of
 * its starts is in, so no window of `per` ever holds more than `count` starts — at the price of letting a start wait
 * up to one bucket (1% of `per`) longer than an exact log of start times would. A hundred buckets at most, so the
 * row stays small whatever `count` is.
 */

const BUCKETS = 100

/** Starts counted in one bucket: `[end, starts]`, `end` the epoch ms after the bucket's last start. */
type Bucket = [number, number]

export interface Taken {
  /** Starts granted now, at most the ones asked for. */
  granted: number
  /** The window as it is to be stored. */
  window: string
  /** When the window next has room, if it has none left now (epoch ms). */
  opensAt: number | undefined
}

function parse(stored: string | null | undefined): Bucket[] {
  if (!stored) return []
  try {
    const buckets: unknown = JSON.parse(stored)
    return Array.isArray(buckets) ? buckets.filter((b): b is Bucket => Array.isArray(b) && b.length === 2 && b.every(Number.isFinite)) : []
  } catch {
    return [] // a window nobody can read is an empty one: at worst one period's starts are not counted
  }
}

/**
 * Takes up to `wanted` starts at `now` from the `stored` window of a queue limited by `limit`. `now` is the database's
 * time as the instance knows it: a bucket leaves the window when the earliest time it may be is a period past the
 * bucket, and the starts taken are counted at the latest, so that no instance lets them go early, whatever its clock.
 */
export function take(stored: string | null | undefined, limit: RateLimitSettings, wanted: number, now: Span): Taken {
  const width = Math.max(1, Math.floor(limit.per / BUCKETS))
  // a bucket counts while it ends after the window's start: one of its starts may be in the window
  const live = parse(stored).filter(([end]) => end > now.earliest - limit.per).sort((a, b) => a[0] - b[0])
  const used = live.reduce((sum, [, starts]) => sum + starts, 0)
  const granted = Math.max(0, Math.min(wanted, limit.count - used))
  if (granted > 0) {
    const end = (Math.floor(now.latest / width) + 1) * width
    const last = live[live.length - 1]
    if (last?.[0] === end) last[1] += granted
    else live.push([end, granted])
  }
  const full = used + granted >= limit.count
  return { granted, window: JSON.stringify(live), opensAt: full ? opensAt(live, limit, used + granted) : undefined }
}

/** When enough of the oldest buckets have left the window for one more start. */
function opensAt(live: Bucket[], limit: RateLimitSettings, used: number): number {
  let left = used
  for (const [end, starts] of live) {
    left -= starts
    if (left < limit.count) return end + limit.per
  }
  return live[live.length - 1][0] + limit.per
}
