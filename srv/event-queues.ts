import cds from '@sap/cds'
import { runDetached } from '../lib/cap/contexts'
import { beforeDisconnect } from '../lib/cap/lifecycle'
import { limitPage } from '../lib/cap/paging'
import { keepMethodBeside, requireRoles } from '../lib/cap/services'
import { LagHistory, TenantLagHistories, type LagSample } from '../lib/ops/lag-history'
import { eventQueues } from '../lib/plugin'
import { parseDuration } from '../lib/time/durations'
import { describeRows, messagesPerPage, noSuchMessage, notDeadLetter, OperatorQueries, readsMessages, type DeadLetterFilter, type QueueStatisticsRow } from '../lib/ops/queries'
import { clock } from '../lib/time/clock'
import { controlFields, UnknownQueue } from '../lib/controls/operator'
import type { QueueControl } from '../lib/controls/table'
import { QueueError } from '../lib/errors'

type Request = cds.Request & { params: unknown[] }

/** The message ID a bound action was called on: CAP passes single keys as a value or as `{ ID }`. */
function boundID(req: Request): string {
  const key = req.params[req.params.length - 1]
  return typeof key === 'object' && key !== null ? String((key as { ID: unknown }).ID) : String(key)
}

/** The filters of the bulk actions; an invalid `olderThan` is the caller's mistake (400). */
function filterOf(req: Request): DeadLetterFilter | undefined {
  const { queue, service, event, olderThan } = req.data as Record<string, string | null | undefined>
  const filter: DeadLetterFilter = {}
  if (queue) filter.queue = queue
  if (service) filter.service = service
  if (event) filter.event = event
  if (olderThan) {
    try {
      filter.enqueuedBefore = clock.now() - parseDuration(olderThan, 'olderThan')
    } catch (e) {
      return void req.reject(400, (e as Error).message)
    }
  }
  return filter
}

/**
 * `lagHistory()` of the caller's tenant. A single tenant app samples its one database in the background, as the
 * privileged system outside any request: the history must exist before anyone looks at it. A multitenant app keeps a
 * history per tenant, each counted in that tenant's database and sampled when that tenant's operators ask
 * (`TenantLagHistories`): one history would show every tenant's operator the others' queues and figures.
 */
function lagHistoryOf(queries: OperatorQueries, interval: number, multitenant: boolean): (tenant: string | undefined) => Promise<LagSample[]> {
  if (multitenant) {
    const counted = (tenant: string | undefined, at: number) =>
      cds.tx({ tenant, user: new cds.User.Privileged() }, () => queries.statistics(at)) as unknown as Promise<QueueStatisticsRow[]>
    const histories = new TenantLagHistories(counted, interval)
    if (cds.db) beforeDisconnect(cds.db, () => histories.stop())
    return tenant => histories.history(tenant)
  }
  // A sample's reads are statements of their own: one transaction around them held SQLite's only connection between
  // them and was found again through cds.context at each, so a test stubbing that getter meanwhile hung the database.
  const history = new LagHistory(at => runDetached({ user: new cds.User.Privileged() }, () => queries.statistics(at)), interval)
  cds.once('served', () => history.start())
  if (cds.db) beforeDisconnect(cds.db, () => history.stop())
  return () => history.history()
}

/** Operations on the event queue: dead letters (CAP's recipe, plus bulk actions), pending messages, statistics. */
export default class EventQueuesService extends cds.ApplicationService {
  override async init(): Promise<void> {
    const { settings, runner } = eventQueues()
    const queries = new OperatorQueries(settings.queues, settings.appid, settings.runner.store)
    requireRoles(this, settings.operatorRoles)
    const lagHistory = lagHistoryOf(queries, settings.lagSampleInterval, runner.tenants.multitenant)

    /** Revived messages run right away, not at the next poll; after commit, so the runner sees them. */
    const wakeAfterCommit = (req: Request) => req.on('succeeded', () => runner.wake(req.tenant))

    /** Finds the dead letter a bound action targets, or rejects: 404 if there is no such message, 409 if it is not dead. */
    const deadLetter = async (req: Request): Promise<string | undefined> => {
      const ID = boundID(req)
      const state = await queries.messageState(ID)
      if (!state) return void req.reject(404, noSuchMessage(ID))
      if (!state.dead) return void req.reject(409, notDeadLetter(state))
      return ID
    }

    this.before('READ', 'DeadOutboxMessages', (req: Request) => {
      const query = req.query as unknown as { where(condition: object): unknown }
      query.where(queries.ownRows())
      query.where(queries.deadLetters())
    })
    this.before('READ', 'PendingOutboxMessages', (req: Request) => {
      const query = req.query as unknown as { where(condition: object): unknown }
      query.where(queries.ownRows())
      query.where(queries.deadLetters(false))
    })
    // A list that shows messages comes in pages that fit the heap, whatever the messages' size (see `messagesPerPage`);
    // over HTTP, where each page links the next (a read in code pages itself, as with CAP's own page size).
    this.before('READ', ['DeadOutboxMessages', 'PendingOutboxMessages'], (req: Request) => {
      if (req.http && readsMessages(req.query)) limitPage(req.query, messagesPerPage(settings.queues, settings.runner.maxClaimBytes))
    })
    this.after('READ', ['DeadOutboxMessages', 'PendingOutboxMessages'], (rows: unknown) => describeRows(rows))

    this.on('revive', 'DeadOutboxMessages', async (req: Request) => {
      const ID = await deadLetter(req)
      if (!ID) return
      await queries.revive([ID])
      wakeAfterCommit(req)
    })
    this.on('delete', 'DeadOutboxMessages', async (req: Request) => {
      const ID = await deadLetter(req)
      if (ID) await queries.remove([ID])
    })

    this.on('reviveAll', async (req: Request) => {
      const filter = filterOf(req)
      if (!filter) return
      const revived = await queries.revive(await queries.deadLetterIDs(filter))
      if (revived) wakeAfterCommit(req)
      return revived
    })
    this.on('deleteAll', async (req: Request) => {
      const filter = filterOf(req)
      if (!filter) return
      return queries.remove(await queries.deadLetterIDs(filter))
    })

    /**
     * `pause` and `resume`: the table first, in the request's transaction (its tenant's database); this process's
     * runner knows at once after the commit, the others through the table.
     */
    const control = async (req: Request, change: (queue: unknown, by: string) => Promise<QueueControl>) => {
      try {
        const after = await change((req.data as { queue?: unknown }).queue, req.user.id)
        req.on('succeeded', () => {
          runner.controls.apply(req.tenant, after)
          runner.wake(req.tenant)
        })
        return { queue: after.queue, ...controlFields(after, queries.settingsOf(after.queue)) }
      } catch (e) {
        if (e instanceof UnknownQueue) return req.reject(404, e.message)
        if (e instanceof QueueError) return req.reject(400, e.message)
        throw e
      }
    }
    this.on('pause', (req: Request) => control(req, (queue, by) => queries.pause(queue, by)))
    this.on('resume', (req: Request) => control(req, async (queue, by) => (await queries.resume(queue, by)).after))

    this.on('statistics', () => queries.statistics())
    this.on('lagHistory', (req: Request) => lagHistory(req.tenant))

    await super.init()
  }
}

// The bound action `delete` of DeadOutboxMessages (CAP's recipe's name for it) beside srv.delete, without CAP's warning.
keepMethodBeside(EventQueuesService.prototype, 'delete')
