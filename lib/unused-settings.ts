import cds from '@sap/cds'
import { closest } from './config/keys'
import type { ReceiverSettings } from './interfaces'
import { LOG } from './log'

/**
 * Settings of `cds.requires` that nothing takes, each a warning naming the entry, the value and what it needs — CAP
 * itself ignores them silently:
 * - a queue setting (`outboxed`, `outbox`, `queued`), `inboxed` or `idempotencyKey` on an entry that configures no
 *   service (no `kind`, `impl`, `model`, `credentials` or `vcap`) and names none of the model's services or those
 *   served: a misspelt service name, whose real service stays synchronous, takes no inbox or sends no key;
 * - `inboxed` on a service that is no messaging service, `idempotencyKey` on one that makes no remote calls: found
 *   when the service connects.
 */

type Entry = Record<string, unknown>

/** What makes a `cds.requires` entry a service's configuration rather than a bare set of options. */
const SERVICE_KEYS = ['kind', 'impl', 'model', 'credentials', 'vcap']
/** Settings that only a service's entry takes. */
const SERVICE_SETTINGS = ['outboxed', 'outbox', 'queued', 'inboxed', 'inbox', 'idempotencyKey']

const isEntry = (conf: unknown): conf is Entry => !!conf && typeof conf === 'object' && !Array.isArray(conf)
const given = (entry: Entry, key: string) => entry[key] !== undefined && entry[key] !== false && entry[key] !== null

/** The names of every service the app has: defined in its model, served or connected, or configured in `requires`. */
function serviceNames(requires: Record<string, unknown>): string[] {
  const model = Object.entries(cds.model?.definitions ?? {}).filter(([, d]) => (d as { kind?: string }).kind === 'service').map(([name]) => name)
  const configured = Object.entries(requires).filter(([, conf]) => isEntry(conf) && SERVICE_KEYS.some(key => conf[key] !== undefined)).map(([name]) => name)
  return [...new Set([...model, ...Object.keys(cds.services), ...configured])]
}

/** Warns about each entry of `requires` with a service's setting that names no service; once the app is served. */
export function warnAboutEntriesWithoutService(requires: Record<string, unknown>): void {
  const services = serviceNames(requires)
  for (const [name, conf] of Object.entries(requires)) {
    if (!isEntry(conf) || services.includes(name)) continue
    const settings = SERVICE_SETTINGS.filter(key => given(conf, key))
    if (settings.length === 0) continue
    const hint = closest(name, services)
    LOG.warn(`cds.requires.${name}.${settings.join(', .')} has no effect: no service '${name}' is defined in the model, served or configured (kind, impl)${hint ? `. Did you mean '${hint}'?` : ''}`)
  }
}

/** Warns about receiver settings that `srv`, connected now, does not take. */
export function warnAboutMisplacedReceivers(srv: cds.Service, receivers: ReceiverSettings): void {
  if (receivers.inboxes.has(srv.name) && !(srv instanceof cds.MessagingService)) {
    LOG.warn(`cds.requires.${srv.name}.inboxed has no effect: ${srv.name} is no messaging service, and an inbox keeps what a messaging service receives`)
  }
  if (receivers.idempotencyKeys.has(srv.name) && !(srv instanceof cds.RemoteService)) {
    LOG.warn(`cds.requires.${srv.name}.idempotencyKey has no effect: ${srv.name} makes no remote calls, and the key goes with the requests of remote services (kind odata, rest)`)
  }
}
