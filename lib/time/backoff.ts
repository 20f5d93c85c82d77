import type { BackoffSettings } from '../interfaces'

/** Delay before the next attempt of a message that has failed `attempts` times (CAP's curve by default). */
export function backoffDelay(attempts: number, o: BackoffSettings): number {
  const exact = Math.min(o.max, o.base * (Math.pow(o.factor, attempts) - 1))
  return Math.round(exact * (1 + o.jitter * (Math.random() * 2 - 1)))
}
