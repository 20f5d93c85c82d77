import cds from '@sap/cds'
import { createHash } from 'crypto'
import { beforeInput } from '../cap/handlers'
import { QueueError } from '../errors'
import type { ReceiptRef } from '../interfaces'
import type { QueueStore } from '../store'
import { countDuplicate } from '../telemetry/metrics'
import { LOG } from '../log'
import { fitsKeyColumn, recordedResponse, recordResponse, scopeOf } from './receipts'

/**
 * Idempotent receivers (the consumer half): an action, or the writes of an entity, marked `@idempotent` answer a
 * request whose `Idempotency-Key` they have seen with the response recorded for it, without running again, as the
 * IETF draft "The Idempotency-Key HTTP Header Field" describes. The key and the response are recorded in the
 * operation's own transaction, so they commit with its writes or not at all; a request with the same key and
 * another payload (or of another user) gets 422, one while the first still runs 409. Requests without the header
 * run as before.
 */

export const ANNOTATION = '@idempotent'
/** The request header, lower case as CAP hands HTTP headers to `req.headers`. */
const HEADER = 'idempotency-key'
/** What `@idempotent` on an entity covers: its writes, which HTTP makes POST, PUT, PATCH and DELETE. */
const WRITES = ['CREATE', 'UPDATE', 'UPSERT', 'DELETE']

/** An operation marked `@idempotent`: the event its handler is registered for, on `entity` if bound. */
interface Marked {
  event: string
  entity?: string
  /** `<service>.<entity>.<event>`, or `<service>.<action>`: its receipts' scope. */
  name: string
}

type Definition = { name: string; kind?: string; [annotation: string]: unknown }
type EntityDefinition = Definition & { actions?: Record<string, Definition> }

function local(srv: cds.Service, definition: Definition): string {
  return definition.name.startsWith(`${srv.name}.`) ? definition.name.slice(srv.name.length + 1) : definition.name
}

function invalidAnnotation(where: string, value: unknown, allowed: string): QueueError {
  return new QueueError(`Invalid ${ANNOTATION} of ${where}: ${JSON.stringify(value)}. Expected ${allowed}.`, 'INVALID_QUEUE_INPUT')
}

/** An action marked `@idempotent` (a function is safe by definition: marking one is a mistake). */
function markedAction(definition: Definition, where: string): boolean {
  const value = definition[ANNOTATION]
  if (value === undefined || value === false || value === null) return false
  if (definition.kind === 'function') throw invalidAnnotation(`function ${where}`, value, 'no annotation: functions are read with GET and change nothing')
  if (value === true) return true
  throw invalidAnnotation(`action ${where}`, value, 'true')
}

/** The writes of an entity marked `@idempotent`: all of them for `true`, else the listed ones. */
function markedWrites(definition: Definition, where: string): string[] {
  const value = definition[ANNOTATION]
  if (value === undefined || value === false || value === null) return []
  if (value === true) return WRITES
  if (Array.isArray(value) && value.length && value.every(e => WRITES.includes(e as string))) return value as string[]
  throw invalidAnnotation(`entity ${where}`, value, `true, or a list of ${WRITES.map(e => `'${e}'`).join(', ')}`)
}

/** An annotation that looks like `@idempotent` and is not (`@idempotency`, `@Idempotent`): a typo CAP keeps silently. */
function misspelled(definition: object): string | undefined {
  return Object.keys(definition).find(key => key !== ANNOTATION && /^@idempot/i.test(key))
}

/**
 * What of `srv`'s model looks like an `@idempotent` mark and does nothing: the annotation on an element (it marks
 * actions and entities), or misspelled. A warning each, naming where it is.
 */
function warnAboutMisplacedMarks(srv: cds.Service): void {
  const reflected = srv as unknown as { operations: Iterable<Definition>; entities: Iterable<EntityDefinition & { elements?: Record<string, Definition> }> }
  const warn = (what: string) => LOG.warn(`${what} has no effect: ${ANNOTATION} marks actions and the writes of entities`)
  const check = (definition: object, where: string) => {
    const typo = misspelled(definition)
    if (typo) warn(`${typo} on ${where} (did you mean ${ANNOTATION}?)`)
  }
  for (const operation of reflected.operations) check(operation, operation.name)
  for (const entity of reflected.entities) {
    check(entity, entity.name)
    for (const [name, action] of Object.entries(entity.actions ?? {})) check(action, `${entity.name}.${name}`)
    for (const [name, element] of Object.entries(entity.elements ?? {})) {
      if (element[ANNOTATION] !== undefined) warn(`${ANNOTATION} on element ${entity.name}.${name}`)
      check(element, `element ${entity.name}.${name}`)
    }
  }
}

/** Every operation of `srv` marked `@idempotent`; throws on an annotation value that means nothing. */
export function markedOperations(srv: cds.Service): Marked[] {
  const reflected = srv as unknown as { operations: Iterable<Definition>; entities: Iterable<EntityDefinition> }
  const marked: Marked[] = []
  for (const operation of reflected.operations) {
    const event = local(srv, operation)
    if (markedAction(operation, operation.name)) marked.push({ event, name: `${srv.name}.${event}` })
  }
  for (const entity of reflected.entities) {
    const name = local(srv, entity)
    for (const event of markedWrites(entity, entity.name)) marked.push({ event, entity: name, name: `${srv.name}.${name}.${event}` })
    for (const [event, action] of Object.entries(entity.actions ?? {})) {
      if (markedAction(action, `${entity.name}.${event}`)) marked.push({ event, entity: name, name: `${srv.name}.${name}.${event}` })
    }
  }
  return marked
}

/**
 * The key of a request: the header as the draft defines it, a Structured Field string (`"…"`, RFC 8941), or as many
 * clients send it, unquoted. Undefined: no header; null: a value that is no key (empty, too long for the column).
 */
function keyOf(req: cds.Request): string | null | undefined {
  const raw = (req.headers as Record<string, unknown> | undefined)?.[HEADER]
  if (raw === undefined) return undefined
  if (typeof raw !== 'string') return null
  const quoted = /^"((?:[^"\\]|\\["\\])*)"$/.exec(raw.trim())
  const key = quoted ? quoted[1].replace(/\\(["\\])/g, '$1') : raw.trim()
  return fitsKeyColumn(key) ? key : null
}

/**
 * What makes two requests the same request: who asks, what for, with which keys and payload — as the client sent
 * it, taken before CAP fills in generated keys (a new UUID each time) and defaults.
 */
function fingerprintOf(req: cds.Request, marked: Marked): string {
  const request = [req.user?.id ?? null, marked.name, req.params ?? [], req.data ?? null]
  return createHash('sha256').update(JSON.stringify(request)).digest('hex')
}

const fingerprints = new WeakMap<cds.Request, string>()

/** Errors of the databases CAP runs on for a key that exists already (sqlite, postgres, hana, CAP's own). */
const UNIQUE_VIOLATIONS = ['SQLITE_CONSTRAINT_PRIMARYKEY', 'SQLITE_CONSTRAINT_UNIQUE', '23505', 301, 'UNIQUE_CONSTRAINT_VIOLATION', 'ENTITY_ALREADY_EXISTS']
const isUniqueViolation = (e: unknown) => {
  const { code, message } = (e ?? {}) as { code?: unknown; message?: unknown }
  return UNIQUE_VIOLATIONS.includes(code as string) || UNIQUE_VIOLATIONS.includes(message as string)
}

/** A response as JSON, or an error for one that is not (a stream, binary data): it could not be answered again. */
function recordable(result: unknown, marked: Marked): string {
  const readable = result && typeof result === 'object' && typeof (result as { pipe?: unknown }).pipe === 'function'
  if (!readable && !Buffer.isBuffer(result)) return JSON.stringify(result ?? null)
  throw new QueueError(`${ANNOTATION} operation ${marked.name} returned a stream or binary data, which cannot be recorded to answer a repeated request: remove ${ANNOTATION}, or return JSON`, 'UNRECORDABLE_RESPONSE')
}

/**
 * The keys of requests this process runs now, per database and scope: a second request with one of them gets 409 at
 * once. Across processes the database's lock does the same (`QueueStore.tryLock`, PostgreSQL), else the recording of
 * the second request fails on the key and it gets 409 then.
 */
const running = new Set<string>()

export interface IdempotentOperations {
  store(): QueueStore
  appid: string | undefined
  /** How long keys and responses are kept (ms). */
  retention: number
  /** Whether each tenant has a database of its own: then its keys are its own. */
  multitenant(): boolean
}

/**
 * What a key is in use under while its request runs: the receipt in the database that records it. A tenant of a
 * multitenant app has its receipts in its own database; a single tenant app has one, whatever tenant a user names.
 */
function inUseName(receipt: ReceiptRef, req: cds.Request, options: IdempotentOperations): string {
  const database = options.multitenant() ? (req.tenant ?? '') : ''
  return JSON.stringify([database, receipt.scope, receipt.ID])
}

async function answer(req: cds.Request, next: () => Promise<unknown>, marked: Marked, options: IdempotentOperations): Promise<unknown> {
  const key = keyOf(req)
  if (key === undefined) return next()
  if (key === null) return req.reject(400, `Invalid header Idempotency-Key: expected a string of 1 to 255 characters, e.g. "${cds.utils.uuid()}"`)
  const receipt = { scope: scopeOf('action', marked.name, options.appid), ID: key }
  const inProcess = inUseName(receipt, req, options)
  const stillRunning = () => req.reject(409, `A request with Idempotency-Key "${key}" is still being processed; retry it later to get its response`)
  if (running.has(inProcess)) return stillRunning()
  running.add(inProcess)
  req.on('done', () => void running.delete(inProcess))
  if (!(await options.store().tryLock(inProcess))) return stillRunning()
  const fingerprint = fingerprints.get(req) ?? fingerprintOf(req, marked)
  const recorded = await recordedResponse(receipt)
  if (recorded) {
    if (recorded.fingerprint !== fingerprint) {
      return req.reject(422, `Idempotency-Key "${key}" was used for another request of ${marked.name}: a key identifies one request, use a new one for this`)
    }
    countDuplicate(receipt.scope, req.tenant)
    LOG._debug && LOG.debug(`${marked.name}: answered a repeated request with Idempotency-Key "${key}" from its record`)
    return recorded.response === null ? undefined : JSON.parse(recorded.response)
  }
  const result = await next()
  try {
    await recordResponse(receipt, fingerprint, recordable(result, marked), Date.now(), options.retention)
  } catch (e) {
    if (!isUniqueViolation(e)) throw e
    return req.reject(409, `A request with Idempotency-Key "${key}" was processed at the same time; retry it to get its response`)
  }
  return result
}

/**
 * Registers the answering handler for every operation of `srv` marked `@idempotent`, ahead of the service's own
 * handlers (they run as `next()`), so a recorded response is given before anything runs.
 */
export function serveIdempotent(srv: cds.Service, options: IdempotentOperations | undefined): void {
  warnAboutMisplacedMarks(srv)
  const marked = markedOperations(srv)
  if (marked.length === 0) return
  if (!options) {
    LOG.warn(`${srv.name}: ${marked.map(m => m.name).join(', ')} are marked ${ANNOTATION}, but without the persistent queue (cds.requires.queue: false) nothing records their keys: repeated requests run again`)
    return
  }
  const target = (each: Marked) => (each.entity ? `${srv.name}.${each.entity}` : undefined)
  beforeInput(srv, req => {
    const each = marked.find(m => m.event === req.event && (!m.entity || req.target?.name === target(m)))
    if (each && keyOf(req)) fingerprints.set(req, fingerprintOf(req, each))
  })
  srv.prepend(() => {
    for (const each of marked) {
      const handler = (req: cds.Request, next: () => Promise<unknown>) => answer(req, next, each, options)
      if (each.entity) srv.on(each.event, each.entity, handler as never)
      else srv.on(each.event, handler as never)
    }
  })
}
