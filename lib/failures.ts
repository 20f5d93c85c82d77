import { inspect } from 'util'

/**
 * Credentials that error messages sometimes carry (HTTP clients echo their request): a scheme and its token, a
 * credential-named key and its value (the value may itself start with a scheme), and bare JWTs.
 */
const CREDENTIALS =
  /\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+|("?(?:authorization|cookie|password|client_?secret|(?:access_|refresh_|id_)?token|api_?key)"?\s*[:=]\s*)("[^"]*"|'[^']*'|(?:(?:Bearer|Basic)\s+)?[^\s,}]+)|\beyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*/gi

/**
 * The text kept in `lastError`: name, message, code and stack, never the error's other properties (an HTTP client
 * error carries its whole request configuration, credentials included), with credentials masked and cut to size.
 */
export function storedError(error: unknown, maxLength: number): string {
  let text: string
  if (error instanceof Error) {
    const e = error as Error & { code?: unknown; statusCode?: unknown; status?: unknown }
    const code = e.code ?? e.statusCode ?? e.status
    const head = `${e.name}: ${e.message}${code !== undefined ? ` (code ${String(code)})` : ''}`
    const stack = e.stack?.split('\n').slice(1).join('\n')
    text = stack ? `${head}\n${stack}` : head
  } else {
    text = typeof error === 'string' ? error : inspect(error, { depth: 1, breakLength: Infinity })
  }
  const masked = text.replace(CREDENTIALS, (_m, scheme: string | undefined, key: string | undefined) =>
    scheme ? `${scheme} ***` : key ? `${key}***` : '***'
  )
  return masked.length > maxLength ? masked.slice(0, maxLength - 1) + '…' : masked
}

/** The error as `#failed` handlers receive it: name, message, code and its own plain properties. */
export function errorData(error: unknown): Record<string, unknown> {
  if (!(error instanceof Error)) return { message: typeof error === 'string' ? error : inspect(error) }
  const own: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(error)) {
    if (value === null || ['string', 'number', 'boolean'].includes(typeof value)) own[key] = value
  }
  const e = error as Error & { code?: unknown }
  return { ...own, name: e.name, message: e.message, code: e.code }
}

const PROGRAMMING_ERRORS = new Set(['TypeError', 'ReferenceError', 'SyntaxError', 'RangeError', 'URIError', 'EvalError'])

/** A bug in the handler: retrying cannot help, so the message is dead-lettered at once (and the process lives on). */
export function isProgrammingError(error: unknown): boolean {
  return error instanceof Error && PROGRAMMING_ERRORS.has(error.name) && error.constructor.name !== 'peg$SyntaxError'
}

/** CAP's documented way for a handler to say "never retry this". */
export function isUnrecoverable(error: unknown): boolean {
  return !!(error && typeof error === 'object' && (error as { unrecoverable?: unknown }).unrecoverable)
}
