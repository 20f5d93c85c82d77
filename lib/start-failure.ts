import { QueueError } from './errors'

/**
 * A configuration or annotation error found while the app starts ends it as CAP's own start errors do: one line that
 * says what is wrong (the error's message names the option, the value and what is allowed), and exit code 1 — not an
 * uncaught exception's source excerpt and stack of the plugin's frames. Under a test runner (`global.it`, CAP's own
 * test for it) the error is thrown as it is, so that the test sees it and the runner lives on. Other errors are not
 * the configuration's: they propagate with their stack. The line is written whatever the app's log levels say (the
 * app ends: a silenced `queue` log must not make that silent), in the form of `cds.log`'s lines.
 */
export function failingStart<T>(fn: () => T): T {
  try {
    return fn()
  } catch (e) {
    if (!(e instanceof QueueError) || (globalThis as { it?: unknown }).it) throw e
    console.error(`[queue] - ${e.message}`)
    process.exit(1)
  }
}
