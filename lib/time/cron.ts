import { CronExpressionParser } from 'cron-parser'
import { invalid } from '../errors'

/** Cron for recurring tasks, through cron-parser: validation at the `schedule` call and the next fire time. */

export const CRON_FORMS =
  "a cron expression of five fields (minute hour day-of-month month day-of-week, e.g. '*/10 * * * *'), " +
  "six fields with leading seconds (e.g. '*/30 * * * * *'), or a macro like '@hourly'"

function fieldCount(expression: string): number {
  return expression.trim().split(/\s+/).length
}

/** Whether a text is meant as cron rather than a duration: a macro, or five or six fields. */
export function looksLikeCron(text: string): boolean {
  const trimmed = text.trim()
  return trimmed.startsWith('@') || [5, 6].includes(fieldCount(trimmed))
}

/**
 * The expression, trimmed, if cron-parser accepts it; otherwise an error naming it and the parser's reason.
 * Fewer fields are refused although cron-parser would fill them in: '0 9 *' is more likely a typo than a schedule.
 */
export function checkCron(expression: string, what: string): string {
  const trimmed = expression.trim()
  if (!looksLikeCron(trimmed)) throw invalid(what, expression, CRON_FORMS)
  try {
    CronExpressionParser.parse(trimmed)
  } catch (e) {
    throw invalid(what, expression, `${CRON_FORMS}; cron-parser says: ${(e as Error).message}`)
  }
  return trimmed
}

/**
 * The first fire time strictly after `after`, in `timezone` (undefined: the process's). `seed` fixes what `H`
 * (a hashed value) stands for, so one task keeps the same minute across occurrences and restarts.
 */
export function nextFireTime(expression: string, after: number, timezone: string | undefined, seed: string): Date {
  const options = { currentDate: new Date(after), hashSeed: seed, ...(timezone && { tz: timezone }) }
  return CronExpressionParser.parse(expression, options).next().toDate()
}
