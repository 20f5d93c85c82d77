import cds from '@sap/cds'
import { createHash } from 'crypto'
import { requestFromSendArgs } from '../cap/requests'
import { fitsNameColumn, messageDueAt, NAME_RULE, type Encoded } from '../codec'
import { invalid, QueueError } from '../errors'
import type { QueueInfo, QueueSettings } from '../interfaces'
import type { EventQueues } from '../plugin'
import type { QueueStore } from '../store'
import { checkCron, looksLikeCron, CRON_FORMS } from '../time/cron'
import { DURATION_FORMS, parseDuration } from '../time/durations'
import { firstRun } from '../time/recurrence'
import { clock } from '../time/clock'

/**
 * Scheduled tasks: `srv.schedule(...)` and `srv.unschedule(name)`. A task is a singleton row keyed by service and
 * task name; its timing travels in `msg.queue` (`{ task, after?, every? }`, CAP's shape: `every` is milliseconds
 * or a cron string), and each successful occurrence moves the row to the next one.
 */

interface TaskRequest {
  event?: string
  queue?: QueueInfo
}

type ServiceWithOptions = cds.Service & { options?: Record<string, unknown> }

/** SHA-256 of `input` as a UUID of `version` (RFC 9562 layout). */
function uuidOf(input: string, version: 4 | 8): string {
  const hash = createHash('sha256').update(input).digest()
  hash[6] = (version << 4) | (hash[6] & 0x0f)
  hash[8] = 0x80 | (hash[8] & 0x3f) // RFC variant
  const hex = hash.toString('hex', 0, 16)
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`
}

/** CAP 10's task ID (libx/queue/utils.js): `service:task` (plus `:appid` when set) hashed as a version-4 UUID. */
function cap10TaskId(serviceName: string, task: string, app: string | undefined): string {
  return uuidOf(app ? `${serviceName}:${task}:${app}` : `${serviceName}:${task}`, 4)
}

/** CAP 9's task ID (libx/queue/index.js): `queue||task` hashed as a version-4 UUID; the service is not part of it. */
function cap9TaskId(queueName: string, task: string): string {
  return uuidOf(`${queueName}||${task}`, 4)
}

/**
 * The row ID of a task, and the IDs CAP's built-in queue gave the same task that may belong to another task too
 * (`capIds`: the caller removes such a row only if it is this service's task of that name).
 * - CAP 10's ID joins service, task and appid with ':', so names containing ':' collide (`Shop` + `orders:nightly`
 *   and `Shop:orders` + `nightly`). Without ':' in any of them it is unique and kept as the row ID, so a task CAP 10
 *   registered is replaced, not duplicated; otherwise the ID hashes the parts unambiguously into a version-8 UUID,
 *   which never equals a CAP ID (version 4).
 * - CAP 9's ID names the queue and the task, not the service: every service on a queue shares it for a task name.
 */
export function taskIds(serviceName: string, task: string, app: string | undefined, queueName: string): { ID: string; capIds: string[] } {
  const cap10 = cap10TaskId(serviceName, task, app)
  const cap9 = cap9TaskId(queueName, task)
  if (![serviceName, task, app ?? ''].some(part => part.includes(':'))) return { ID: cap10, capIds: [cap9] }
  return { ID: uuidOf(JSON.stringify([serviceName, task, app ?? null]), 8), capIds: [cap10, cap9] }
}

/**
 * (Re)schedules a task on its queue: upserts its row, due at its first run. Rows of the same task that CAP's built-in
 * queue wrote under its other IDs go, in the same transaction, so the task does not run twice.
 */
export async function upsertTask(store: QueueStore, queue: QueueSettings, encoded: Encoded, info: QueueInfo & { task: string }, appid: string | undefined): Promise<void> {
  const due = firstRun(info, clock.now(), queue.timezone)
  const { ID, capIds } = taskIds(encoded.service, info.task, appid, queue.name)
  await store.upsertTask(messageDueAt(queue.name, encoded, due, info.task, ID))
  await store.unscheduleTaskOf(capIds, info.task, encoded.service)
}

/** CAP's `(value, unit)` form, e.g. `.after(5, 'minutes')`, as one duration text. */
function withUnit(value: unknown, unit: unknown): unknown {
  return unit === undefined ? value : `${String(value)} ${String(unit)}`
}

/** A duration > 0 in milliseconds, or a valid cron expression. */
function interval(value: unknown, what: string): number | string {
  try {
    const ms = parseDuration(value, what)
    if (ms > 0) return ms
  } catch {
    if (typeof value === 'string' && looksLikeCron(value)) return checkCron(value, what)
  }
  throw invalid(what, value, `an interval > 0, as ${DURATION_FORMS}; or ${CRON_FORMS}`)
}

function taskName(value: unknown, what: string, hint = ''): string {
  if (typeof value === 'string' && value.trim() && fitsNameColumn(value)) return value
  throw invalid(what, value, `a non-empty task name of ${NAME_RULE}${hint}`)
}

/**
 * What `srv.schedule(...)` returns. Nothing is written until it is awaited; then the task is upserted in the current
 * transaction. Timing arguments are checked when `.after()` / `.every()` are called, so a typo fails right there.
 */
export class ScheduleBuilder implements PromiseLike<void> {
  private readonly queue: QueueInfo
  private written: Promise<void> | undefined

  constructor(
    private readonly srv: cds.Service,
    private readonly req: TaskRequest
  ) {
    this.queue = req.queue = { ...req.queue, task: req.event }
  }

  private what(method: string): string {
    return `${this.srv.name}.schedule(${JSON.stringify(this.req.event)}).${method}()`
  }

  /** Delays the first run. */
  after(value: number | string, unit?: string): this {
    this.queue.after = parseDuration(withUnit(value, unit), `delay of ${this.what('after')}`)
    return this
  }

  /** Repeats the task: an interval counted from the end of the previous successful run, or a cron expression. */
  every(value: number | string, unit?: string): this {
    this.queue.every = interval(withUnit(value, unit), `interval of ${this.what('every')}`)
    return this
  }

  /** Names the task, so one event can have several independent schedules. */
  as(name: string): this {
    this.queue.task = taskName(name, `task name of ${this.what('as')}`)
    return this
  }

  /** CAP 9's name for `.as()`; without a name the task is named after the event, as it is anyway. */
  asTask(name?: string): this {
    return name === undefined ? this : this.as(name)
  }

  then<R1 = void, R2 = never>(
    onfulfilled?: ((value: void) => R1 | PromiseLike<R1>) | null,
    onrejected?: ((reason: unknown) => R2 | PromiseLike<R2>) | null
  ): Promise<R1 | R2> {
    // Awaiting twice writes once.
    this.written ??= this.write()
    return this.written.then(onfulfilled, onrejected)
  }

  private async write(): Promise<void> {
    if (!this.queue.task) {
      throw new QueueError(`${this.srv.name}.schedule(...) has no event name to name the task by; name it with .as(name)`, 'INVALID_QUEUE_INPUT')
    }
    // Named after its event unless `.as()` named it: the event name must fit too.
    taskName(this.queue.task, `task name (the event name) of ${this.srv.name}.schedule(...)`, '; name it with .as(name)')
    const proxy = cds.queued(this.srv) as unknown as { send(req: TaskRequest): Promise<unknown> }
    await proxy.send(this.req)
  }
}

/** `srv.schedule(...)`, with CAP 9's `srv.schedule.task(...)` (every schedule is a task now). */
export function scheduleFor(srv: cds.Service): ((...args: unknown[]) => ScheduleBuilder) & { task: (...args: unknown[]) => ScheduleBuilder } {
  // `schedule` accepts exactly the argument forms `send` does.
  const schedule = (...args: unknown[]): ScheduleBuilder => new ScheduleBuilder(srv, requestFromSendArgs<TaskRequest>(args))
  return Object.assign(schedule, { task: schedule })
}

/** `srv.unschedule(name)`: removes the task in the current transaction; resolves to the number of tasks removed. */
async function unschedule(plugin: EventQueues, srv: cds.Service, name: unknown): Promise<number> {
  const original = cds.unqueued(srv) as ServiceWithOptions
  const task = taskName(name, `task name of ${original.name}.unschedule()`)
  const queue = plugin.settings.queues.bind(original.name, original.options)
  // Without persistence (`cds.requires.queue: false`) tasks only live until they ran once: nothing to remove.
  if (!cds.db || !queue.persistent) return 0
  const { store } = plugin.runner
  const { ID, capIds } = taskIds(original.name, task, plugin.settings.appid, queue.name)
  return (await store.unschedule(ID)) + (await store.unscheduleTaskOf(capIds, task, original.name))
}

/** `srv.unschedule(name)`, with CAP 9's `srv.unschedule.task(name)`. */
export function unscheduleFor(plugin: EventQueues, srv: cds.Service): ((name: string) => Promise<number>) & { task: (name: string) => Promise<number> } {
  const remove = (name: string): Promise<number> => unschedule(plugin, srv, name)
  return Object.assign(remove, { task: remove })
}
