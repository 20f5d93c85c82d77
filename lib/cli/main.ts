import { QueueError } from '../errors'
import { parseArguments, USAGE } from './args'
import { EXIT } from './exit-codes'
import type { Streams } from './output'

/**
 * `npx cds-event-queues <command>`: the operator service's queries, run from a CAP project's folder on the project's
 * own database configuration (`cds.env`, with its profiles), without starting the app.
 */

type EmitWarning = (warning: string | Error, ...rest: unknown[]) => void

/**
 * Node 22's node:sqlite (the driver of @cap-js/sqlite 3) warns on every start that it is experimental: noise on an
 * operator's terminal and in the stderr scripts read. Every other warning still shows.
 */
function quietSqliteWarning(): void {
  const emit = process.emitWarning.bind(process) as EmitWarning
  const filtered: EmitWarning = (warning, ...rest) => {
    const text = typeof warning === 'string' ? warning : warning.message
    if (!/SQLite is an experimental feature/.test(text)) emit(warning, ...rest)
  }
  process.emitWarning = filtered as typeof process.emitWarning
}

/** Runs the CLI; resolves to the process's exit code (never rejects). */
export async function main(argv: string[], streams: Streams = process): Promise<number> {
  let invocation
  try {
    invocation = parseArguments(argv)
  } catch (e) {
    streams.stderr.write(`${(e as Error).message}\nRun cds-event-queues --help for the commands and their options.\n`)
    return EXIT.USAGE
  }
  if (invocation.command === 'help') {
    streams.stdout.write(USAGE)
    return EXIT.OK
  }
  // A driver may throw outside any promise (better-sqlite3 on a missing folder): still one line and exit code 1.
  process.once('uncaughtException', e => {
    void describeFailure(e).then(reason => {
      streams.stderr.write(`cds-event-queues ${invocation.command} failed: ${reason}\n`)
      process.exit(EXIT.FAILED)
    })
  })
  quietSqliteWarning()
  // Before cds is loaded: cds.env is computed once, with the profile it finds then.
  if (invocation.options.profile) process.env.CDS_ENV = invocation.options.profile
  try {
    const { openSession } = await import('./session')
    const session = await openSession(streams, invocation)
    // Which database the command works on, always: an empty answer from the wrong one (a profile not given) shows.
    streams.stderr.write(`cds-event-queues ${invocation.command} on ${session.database}\n`)
    try {
      const { runCommand } = await import('./commands')
      return await runCommand(session, invocation)
    } finally {
      await session.close()
    }
  } catch (e) {
    const usage = e instanceof QueueError
    streams.stderr.write(usage ? `${e.message}\n` : `cds-event-queues ${invocation.command} failed: ${await describeFailure(e)}\n`)
    return usage ? EXIT.USAGE : EXIT.FAILED
  }
}

/** A failure in an operator's words: a table of the plugin missing says to deploy, others name their code. */
async function describeFailure(e: unknown): Promise<string> {
  const { missingTable, missingTableLine } = await import('../store/missing-tables')
  const table = missingTable(e)
  if (table !== undefined) return missingTableLine(table, undefined)
  if (!(e instanceof Error)) return String(e)
  const code = (e as { code?: unknown }).code
  return code ? `${e.message} (${String(code)})` : e.message
}
