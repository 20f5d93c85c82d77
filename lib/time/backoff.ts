import type { BackoffSettings } from '../interfaces'

/** Delay before the next attempt of a message that has failed `attempts` times (CAP's curve by default). */
export function backoffDelay(attempts: number, o: BackoffSettings): number {
  const exact = Math.min(o.max, o.base * (Math.pow(o.factor, attempts) - 1))
  return Math.round(exact * (1 + o.jitter * (Math.random() * 2 - 1)))
}

/** Wait before reconnection attempt `failures` (1, 2 …): 100 ms doubling up to `max`, spread by up to half of it. */
export function reconnectDelay(failures: number, max: number): number {
  const exact = Math.min(max, 100 * 2 ** Math.max(0, failures - 1))
  return Math.round(exact * (0.5 + Math.random() / 2))
}
