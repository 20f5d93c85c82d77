import { invalid } from '../errors'
import { DURATION_FORMS, parseDuration } from '../time/durations'

/**
 * The command line of `cds-event-queues`, parsed and validated before anything connects: a typo is an error that
 * names the option, the value and what is allowed, and costs no database round trip.
 */

export const COMMANDS = ['status', 'pending', 'dead', 'revive', 'delete', 'purge', 'pause', 'resume', 'help'] as const
export type Command = (typeof COMMANDS)[number]

export interface Options {
  queue?: string
  service?: string
  event?: string
  /** `--older-than`, in ms: only messages enqueued longer ago than this. */
  olderThan?: number
  all: boolean
  json: boolean
  limit?: number
  /** `status --max-lag`, in ms: exit 4 if a queue's relay lag is larger. */
  maxLag?: number
  /** `status --max-dead`: exit 4 if there are more dead letters. */
  maxDead?: number
  profile?: string
  /** `--tenant`: in a multitenant app, the tenant whose database holds the messages. */
  tenant?: string
}

export interface Invocation {
  command: Command
  /** Message IDs (`revive`, `delete`), or the queue (`pause`, `resume`). */
  ids: string[]
  options: Options
}

type Kind = 'text' | 'duration' | 'count' | 'flag'
const OPTIONS: Record<string, Kind> = {
  '--queue': 'text',
  '--service': 'text',
  '--event': 'text',
  '--older-than': 'duration',
  '--all': 'flag',
  '--json': 'flag',
  '--limit': 'count',
  '--max-lag': 'duration',
  '--max-dead': 'count',
  '--profile': 'text',
  '--tenant': 'text',
  '--help': 'flag'
}
const FILTERS = ['--queue', '--service', '--event', '--older-than']
const ALLOWED: Record<Command, string[]> = {
  status: ['--json', '--max-lag', '--max-dead'],
  pending: [...FILTERS, '--limit', '--json'],
  dead: [...FILTERS, '--limit', '--json'],
  revive: ['--all', ...FILTERS],
  delete: ['--all', ...FILTERS],
  purge: FILTERS,
  pause: [],
  resume: [],
  help: []
}
const GLOBAL = ['--profile', '--tenant', '--help']

const isCommand = (word: string): word is Command => (COMMANDS as readonly string[]).includes(word)

function value(name: string, kind: Kind, raw: string | undefined): string | number | boolean {
  if (kind === 'flag') {
    if (raw !== undefined) throw invalid(`option ${name}`, raw, 'no value: it is a flag')
    return true
  }
  if (raw === undefined || raw === '') throw invalid(`option ${name}`, raw, kind === 'duration' ? DURATION_FORMS : kind === 'count' ? 'an integer >= 0' : 'a value')
  if (kind === 'duration') return parseDuration(raw, name)
  if (kind === 'count') {
    if (!/^\d+$/.test(raw)) throw invalid(name, raw, 'an integer >= 0')
    return Number(raw)
  }
  return raw
}

const OPTION_KEYS: Record<string, keyof Options> = {
  '--queue': 'queue',
  '--service': 'service',
  '--event': 'event',
  '--older-than': 'olderThan',
  '--all': 'all',
  '--json': 'json',
  '--limit': 'limit',
  '--max-lag': 'maxLag',
  '--max-dead': 'maxDead',
  '--profile': 'profile',
  '--tenant': 'tenant'
}

/** Parses `argv` (without node and the script); throws a QueueError naming the first mistake. */
export function parseArguments(argv: string[]): Invocation {
  const [first, ...rest] = argv
  if (first === undefined || first === '--help' || first === '-h') return { command: 'help', ids: [], options: { all: false, json: false } }
  if (!isCommand(first)) throw invalid('command', first, `one of ${COMMANDS.join(', ')}`)
  const command = first
  const options: Options = { all: false, json: false }
  const ids: string[] = []
  for (let i = 0; i < rest.length; i++) {
    const word = rest[i]
    if (!word.startsWith('-')) {
      ids.push(word)
      continue
    }
    const [name, inline] = word.includes('=') ? [word.slice(0, word.indexOf('=')), word.slice(word.indexOf('=') + 1)] : [word, undefined]
    const allowed = [...ALLOWED[command], ...GLOBAL]
    if (name === '-h' || name === '--help') return { command: 'help', ids: [], options }
    if (!allowed.includes(name)) throw invalid(`option of cds-event-queues ${command}`, name, `one of ${allowed.join(', ')}`)
    const kind = OPTIONS[name]
    const raw = inline ?? (kind === 'flag' ? undefined : rest[++i])
    Object.assign(options, { [OPTION_KEYS[name]]: value(name, kind, raw) })
  }
  check(command, ids, options)
  return { command, ids, options }
}

/** What the options mean together: IDs or `--all`, never both; filters only with `--all`; purge needs an age. */
function check(command: Command, ids: string[], options: Options): void {
  const filtered = options.queue !== undefined || options.service !== undefined || options.event !== undefined || options.olderThan !== undefined
  if (command === 'revive' || command === 'delete') {
    const what = `arguments of cds-event-queues ${command}`
    const forms = 'message IDs, or --all with optional --queue, --service, --event, --older-than'
    if (ids.length && options.all) throw invalid(what, [...ids, '--all'].join(' '), `${forms} (not both)`)
    if (!ids.length && !options.all) throw invalid(what, filtered ? 'filters without --all' : 'none', forms)
    if (ids.length && filtered) throw invalid(what, ids.join(' ') + ' with filters', `${forms} (filters apply to --all only)`)
    return
  }
  if (command === 'pause' || command === 'resume') {
    if (ids.length !== 1) throw invalid(`arguments of cds-event-queues ${command}`, ids.join(' ') || 'none', 'the name of one queue')
    return
  }
  if (ids.length) throw invalid(`arguments of cds-event-queues ${command}`, ids.join(' '), 'options only')
  if (command === 'purge' && options.olderThan === undefined) {
    throw invalid('option --older-than of cds-event-queues purge', undefined, `a duration such as '30d' (${DURATION_FORMS})`)
  }
}

export const USAGE = `Usage: cds-event-queues <command> [options]   (run in the folder of a CAP project)

Commands:
  status [--json] [--max-lag <duration>] [--max-dead <n>]
                             pending, processing and dead messages and the relay lag per queue, service and event
  pending [filters] [--limit <n>] [--json]
                             the messages waiting, longest first: attempts, last error, who processes them
  dead [filters] [--limit <n>] [--json]
                             the dead letters, oldest first: queue, service, event, attempts, last error
  revive <ID>... | --all [filters]
                             revive dead letters: attempts reset, processed at the app's next poll (at once on PostgreSQL)
  delete <ID>... | --all [filters]
                             delete dead letters without processing them
  purge --older-than <duration> [--queue|--service|--event <name>]
                             delete the dead letters enqueued longer ago than <duration>, e.g. 30d
  pause <queue>              pause a queue in every instance: its messages stay in the table until it is resumed
  resume <queue>             resume a paused queue (and close its circuit breaker): its messages run again

Filters: --queue <name> --service <name> --event <name> --older-than <duration> (all given must match)
Options: --profile <name> uses that cds profile's configuration (like CDS_ENV), --help shows this text,
         --tenant <id> the tenant whose messages to operate on: required in a multitenant app (each tenant's
         messages are in that tenant's database), refused in any other

Exit codes: 0 done · 1 failed (e.g. the database is unreachable) · 2 invalid command line or configuration ·
            3 a given ID is no dead letter (the others were handled) · 4 status: over --max-lag or --max-dead
`
