import cds from '@sap/cds'
import { hostname, userInfo } from 'os'
import { dialectFor } from '../store/dialects'
import { resumed } from '../controls/operator'
import { invalid } from '../errors'
import { CHUNK, noSuchMessage, notDeadLetter, type DeadLetterFilter, type OperatorQueries, type QueueStatisticsRow } from '../ops/queries'
import type { Invocation, Options } from './args'
import { EXIT } from './exit-codes'
import { firstLine, progress, seconds, table, writeJsonArray, type Streams } from './output'
import { clock } from '../time/clock'

/** What a command works with: the operator service's queries on the project's own database. */
export interface Session {
  queries: OperatorQueries
  db: cds.DatabaseService
  /** Which database that is, for the operator (see `describeDatabase`): a command that finds nothing names it. */
  database: string
  /** The tenant whose database holds the messages (`--tenant`, a multitenant app); undefined: the app's one database. */
  tenant?: string
  streams: Streams
}

const STATUS_HEADERS = ['QUEUE', 'SERVICE', 'EVENT', 'PENDING', 'PROCESSING', 'DEAD', 'LAG', 'OLDEST DUE SINCE', 'STATE']

/**
 * What holds a queue back, as the status table says it: an operator's pause, its circuit breaker, the broker a
 * messaging service's events wait for.
 */
function stateOf(r: QueueStatisticsRow): string {
  if (r.paused) return `paused by ${r.pausedBy ?? 'an operator'}`
  if (r.breaker === 'open') return `breaker open until ${r.breakerUntil ?? '?'}`
  if (r.breaker === 'probing') return 'breaker probing'
  return r.brokerWaitingSince ? `waiting for the broker since ${r.brokerWaitingSince}, ${r.pending} events` : ''
}

/**
 * Runs `fn` in a transaction of its own, in the session's tenant: a bulk operation commits chunk by chunk, never
 * holding locks for long.
 */
const inTransaction = <T>({ db, tenant }: Session, fn: () => Promise<T>): Promise<T> =>
  (tenant === undefined ? db.tx(fn) : db.tx({ tenant, user: new cds.User.Privileged() }, fn)) as unknown as Promise<T>

async function status(session: Session, options: Options): Promise<number> {
  const { queries, streams } = session
  const rows = await inTransaction(session, () => queries.statistics())
  if (options.json) streams.stdout.write(JSON.stringify(rows, null, 2) + '\n')
  else if (!rows.length) streams.stdout.write(`No messages are waiting and there are no dead letters in ${session.database}.\n`)
  else {
    const cells = rows.map(r => [r.queue, r.service ?? '', r.event ?? '', r.pending, r.processing, r.dead, seconds(r.relayLag), r.oldestPendingSince ?? '', stateOf(r)])
    streams.stdout.write(table(STATUS_HEADERS, cells))
  }
  return thresholds(rows, options, streams)
}

/**
 * `--max-lag` / `--max-dead`: a cron job or a probe can alert on the exit code alone. A paused queue lags on purpose:
 * its lag is named on stderr as not checked, and does not change the exit code.
 */
function thresholds(rows: QueueStatisticsRow[], options: Options, streams: Streams): number {
  const exceeded: string[] = []
  if (options.maxLag !== undefined) {
    for (const r of rows.filter(r => r.relayLag * 1000 > options.maxLag!)) {
      const lag = `relay lag of ${[r.queue, r.service, r.event].filter(Boolean).join(' / ')} is ${seconds(r.relayLag)}, over --max-lag ${seconds(Math.round(options.maxLag / 1000))}`
      if (r.paused) streams.stderr.write(`${lag}, but is not checked: the queue is paused (by ${r.pausedBy ?? 'an operator'} since ${r.pausedAt})\n`)
      else exceeded.push(lag)
    }
  }
  const dead = rows.reduce((sum, r) => sum + r.dead, 0)
  if (options.maxDead !== undefined && dead > options.maxDead) exceeded.push(`${dead} dead letter${dead === 1 ? '' : 's'}, over --max-dead ${options.maxDead}`)
  for (const line of exceeded) streams.stderr.write(`${line}\n`)
  return exceeded.length ? EXIT.THRESHOLD : EXIT.OK
}

function filterOf(options: Options): DeadLetterFilter {
  const filter: DeadLetterFilter = {}
  if (options.queue !== undefined) filter.queue = options.queue
  if (options.service !== undefined) filter.service = options.service
  if (options.event !== undefined) filter.event = options.event
  if (options.olderThan !== undefined) filter.enqueuedBefore = clock.now() - options.olderThan
  return filter
}

/**
 * `dead`: the list, without the messages (see `DeadLetterSummary`); `--json` adds each one's message, read and written
 * one at a time, so the list costs the heap one message however many there are.
 */
async function dead(session: Session, options: Options): Promise<number> {
  const { queries, streams } = session
  const rows = await inTransaction(session, () => queries.listDeadLetters(filterOf(options), options.limit))
  if (options.json) await writeJsonArray(streams, rows, async row => ({ ...row, msg: (await inTransaction(session, () => queries.message(row.ID))) ?? null }))
  else if (!rows.length) streams.stdout.write(`No dead letters in ${session.database}.\n`)
  else {
    const cells = rows.map(r => [r.ID, r.target, r.service ?? '', r.event ?? '', r.attempts, r.lastAttemptTimestamp ?? '', firstLine(r.lastError)])
    streams.stdout.write(table(['ID', 'QUEUE', 'SERVICE', 'EVENT', 'ATTEMPTS', 'LAST ATTEMPT', 'LAST ERROR'], cells))
  }
  return EXIT.OK
}

async function pending(session: Session, options: Options): Promise<number> {
  const { queries, streams } = session
  const rows = await inTransaction(session, () => queries.listPending(filterOf(options), options.limit))
  if (options.json) streams.stdout.write(JSON.stringify(rows, null, 2) + '\n')
  else if (!rows.length) streams.stdout.write(`No messages are waiting in ${session.database}.\n`)
  else {
    const cells = rows.map(r => [r.ID, r.target, r.service ?? '', r.event ?? '', r.attempts, r.timestamp, r.status === 'processing' ? `processing (${r.claimedBy ?? '?'})` : 'waiting', firstLine(r.lastError)])
    streams.stdout.write(table(['ID', 'QUEUE', 'SERVICE', 'EVENT', 'ATTEMPTS', 'WAITING SINCE', 'STATE', 'LAST ERROR'], cells))
  }
  return EXIT.OK
}

/** The given IDs that are dead letters; the others are reported on stderr. */
async function deadOnes(session: Session, ids: string[]): Promise<{ dead: string[]; missing: number }> {
  const { queries, streams } = session
  const dead: string[] = []
  for (const ID of ids) {
    const state = await inTransaction(session, () => queries.messageState(ID))
    if (!state) streams.stderr.write(`${noSuchMessage(ID)}\n`)
    else if (!state.dead) streams.stderr.write(`${notDeadLetter(state)}\n`)
    else dead.push(ID)
  }
  return { dead, missing: ids.length - dead.length }
}

/**
 * Revives or deletes `ids` chunk by chunk, each chunk in a transaction of its own: an interrupted run leaves what it
 * did committed, and running it again continues. Revived rows are announced to the app's runners on PostgreSQL
 * (the same wake-up an enqueue sends); on SQLite they run at the app's next poll.
 */
async function bulk(session: Session, action: 'revive' | 'delete', ids: string[]): Promise<number> {
  const { queries, db, streams } = session
  const verb = action === 'revive' ? 'revived' : 'deleted'
  const wakeUp = action === 'revive' ? dialectFor(db.kind).wakeUp : undefined
  const bar = progress(streams, verb, ids.length, CHUNK)
  let changed = 0
  for (let i = 0; i < ids.length; i += CHUNK) {
    const some = ids.slice(i, i + CHUNK)
    changed += await inTransaction(session, async () => {
      const count = action === 'revive' ? await queries.revive(some) : await queries.remove(some)
      if (count && wakeUp) await db.run(wakeUp.signal)
      return count
    })
    bar.advance(some.length)
  }
  bar.done()
  return changed
}

async function reviveOrDelete(session: Session, action: 'revive' | 'delete', { ids, options }: Invocation): Promise<number> {
  const { queries, streams } = session
  const found = options.all ? { dead: await inTransaction(session, () => queries.deadLetterIDs(filterOf(options))), missing: 0 } : await deadOnes(session, ids)
  const changed = await bulk(session, action, found.dead)
  const none = changed === 0 ? `: none matched in ${session.database}` : ''
  streams.stdout.write(`${action === 'revive' ? 'Revived' : 'Deleted'} ${changed} dead letter${changed === 1 ? '' : 's'}${none}.\n`)
  return found.missing ? EXIT.NOT_DEAD : EXIT.OK
}

/** Who pauses or resumes with the CLI: the operator's user on this host, as the log and the table record it. */
function operator(): string {
  let user: string | undefined
  try {
    user = userInfo().username
  } catch {
    user = process.env.USER ?? process.env.LOGNAME // a container user without an entry in /etc/passwd
  }
  return `${user ?? 'unknown'}@${hostname()} (cli)`
}

/** `pause <queue>` / `resume <queue>`: in the table, for every instance; running ones learn of it at their next poll. */
async function control(session: Session, action: 'pause' | 'resume', queue: string): Promise<number> {
  const { queries, streams } = session
  const by = operator()
  if (action === 'pause') {
    const control = await inTransaction(session, () => queries.pause(queue, by))
    const since = `by ${control.pausedBy} since ${new Date(control.pausedAt ?? Date.now()).toISOString()}`
    streams.stdout.write(`Paused queue ${queue} (${since}): its messages stay in the table until it is resumed.\n`)
    return EXIT.OK
  }
  const { before } = await inTransaction(session, () => queries.resume(queue, by))
  streams.stdout.write(`Resumed queue ${queue}: ${resumed(before)}.\n`)
  return EXIT.OK
}

/**
 * `--queue` must name a queue of the project: a typo would match nothing, and the command would report that as done
 * (exit 0). A queue only code creates is known by its rows.
 */
async function checkQueue(session: Session, { queue }: Options): Promise<void> {
  if (queue === undefined) return
  const names = await inTransaction(session, () => session.queries.queueNames())
  if (names.includes(queue)) return
  throw invalid('--queue', queue, `a queue of this project: ${names.join(', ')} (a queue created in code with cds.queued(srv, options) is known once its messages are in the table)`)
}

export async function runCommand(session: Session, invocation: Invocation): Promise<number> {
  await checkQueue(session, invocation.options)
  switch (invocation.command) {
    case 'status':
      return status(session, invocation.options)
    case 'pending':
      return pending(session, invocation.options)
    case 'dead':
      return dead(session, invocation.options)
    case 'revive':
      return reviveOrDelete(session, 'revive', invocation)
    case 'delete':
      return reviveOrDelete(session, 'delete', invocation)
    case 'purge':
      return reviveOrDelete(session, 'delete', { ...invocation, options: { ...invocation.options, all: true } })
    case 'pause':
    case 'resume':
      return control(session, invocation.command, invocation.ids[0])
    case 'help':
      return EXIT.OK
  }
}
