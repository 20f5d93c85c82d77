import type { RedisStreamsSettings } from '../interfaces'
import { reconnectDelay } from '../time/backoff'
import type { LinkLog, RedisLink } from './redis-link'
import type { BrokerMessage } from '../cap/messaging'
import { OwnedBatch } from './stream-batch'
import { claimReply, entryMessage, groupLag, readReply, type StreamEntry } from './stream-entries'

/**
 * The consuming side of a `redis-streams` service: this process as a consumer of its app's group on every subscribed
 * stream. It reads new entries (XREADGROUP `>`), hands each to the subscribers and acknowledges it (XACK) only after
 * its effect committed; entries it received and did not acknowledge (a failure, a crash before XACK) stay pending and
 * are read again (XREADGROUP `0`: this consumer's pending entries), by this process after a backoff or, once they are
 * `claimAfter` old, by whichever consumer of the group claims them (XAUTOCLAIM). A batch it works through stays its
 * own (lib/messaging/stream-batch.ts). Entries are handled one at a time in stream order; a failure stops the batch,
 * so a failing entry blocks the later ones of this consumer until it succeeds. A read takes at most
 * `entriesPerRead` entries, so that what it holds stays bounded however large the entries are.
 */

/** How long a read waits for new entries: also the longest a shutdown waits for the read in progress. */
const BLOCK_MS = 1000
/** Entries per claim (JUSTID: IDs only), and the most per read. */
const COUNT = 100
/** Longest pause after failed passes (broker or database unreachable, a subscriber failing). */
const MAX_RETRY_DELAY = 10_000
/** How long a shutdown waits for the pass in progress (a read, the entries of a batch) before closing the connection. */
const STOP_WAIT = 15_000

export interface ConsumerHost {
  /** The streams to read: the subscribed topics, asked on every pass, so subscriptions made later are read too. */
  streams(): string[]
  /**
   * Whether messages of `tenant` are to be handled (false: its tenant is not subscribed, and its database must not be
   * opened); `fresh`: the last pass failed, so what is known of the tenants may be outdated.
   */
  accepts(tenant: string | undefined, fresh: boolean): Promise<boolean>
  /** Hands a message to the subscribers; resolves once its effect (inbox row, handler's writes) committed. */
  deliver(message: BrokerMessage, tenant: string | undefined): Promise<void>
  /** An entry of a tenant that is not subscribed, acknowledged without being handled. */
  dropped(stream: string, tenant: string | undefined): void
  log: LinkLog & { error(...args: unknown[]): void }
}

export interface ConsumerLimits {
  /** The most entries one read takes (at least 1, at most 100), shared among the streams (but one of each at least). */
  entriesPerRead: number
}

const isCode = (e: unknown, code: string) => e instanceof Error && e.message.startsWith(code)

export class StreamConsumer {
  private readonly groups = new Set<string>()
  /** Per stream, how many entries this process reported lost to trimming (see `reportTrimmed`). */
  private readonly reportedLost = new Map<string, number>()
  /** Whether this consumer may have pending entries to read again; at start, those of a previous run under its name. */
  private ownPending = true
  private nextClaim = 0
  private failures = 0
  private stopped = false
  private running: Promise<void> | undefined
  private wakeUp: (() => void) | undefined

  constructor(
    private readonly link: RedisLink,
    private readonly settings: RedisStreamsSettings,
    private readonly host: ConsumerHost,
    private readonly limits: ConsumerLimits
  ) {
    // a pass that failed while Redis was away goes on as soon as it is back, not after the rest of its backoff
    link.onAvailable(() => this.wakeUp?.())
  }

  start(): void {
    this.running ??= this.loop()
  }

  /** Stops after the pass in progress, leaves the group if nothing is pending for it, and closes the connection. */
  async stop(): Promise<void> {
    this.stopped = true
    this.wakeUp?.()
    // A command waiting for a connection would wait for Redis to come back: closing fails it, and the loop ends.
    if (!this.link.ready) await this.link.close()
    let timer: NodeJS.Timeout | undefined
    const finished = await Promise.race([
      (this.running ?? Promise.resolve()).then(() => true),
      new Promise<false>(resolve => (timer = setTimeout(() => resolve(false), STOP_WAIT)))
    ])
    clearTimeout(timer)
    if (finished && this.running && this.link.ready) await this.leaveGroups().catch(() => undefined)
    await this.link.close()
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      try {
        await this.pass()
        this.failures = 0
      } catch (e) {
        if (this.stopped) return
        // Redis lost its data (restarted without persistence): the stream and its group are created again
        if (isCode(e, 'NOGROUP') || isCode(e, 'ERR no such key')) this.groups.clear()
        // what this consumer received and did not acknowledge is read again first
        this.ownPending = true
        this.failures++
        const log = this.failures === 1 ? this.host.log.warn : this.host.log.debug
        log(`${this.settings.group}/${this.settings.consumer}: consuming failed, retrying:`, e)
        await this.pause(reconnectDelay(this.failures, MAX_RETRY_DELAY))
      }
    }
  }

  private async pass(): Promise<void> {
    const streams = await this.streams()
    if (streams.length === 0) return this.pause(BLOCK_MS)
    if (Date.now() >= this.nextClaim) await this.claimStale(streams)
    const history = this.ownPending
    if (!history) await this.reportTrimmed(streams)
    const { group, consumer } = this.settings
    // COUNT is per stream: the read's bound is shared among them
    const count = Math.max(1, Math.floor(this.limits.entriesPerRead / streams.length))
    const readAt = Date.now()
    const reply = await this.link.send([
      'XREADGROUP', 'GROUP', group, consumer, 'COUNT', count, ...(history ? [] : ['BLOCK', BLOCK_MS]),
      'STREAMS', ...streams, ...streams.map(() => (history ? '0' : '>'))
    ], history ? 0 : BLOCK_MS)
    const entries = readReply(reply)
    if (history && entries.length === 0) this.ownPending = false
    await this.handleAll(entries, readAt)
  }

  /**
   * Reports entries trimmed from a stream before the group read them, before new entries are read (reading on moves
   * the group past them). Redis 7 counts, for a group, the entries added since its creation that it has not read
   * (`lag`), trimmed ones included: those beyond the stream's length were trimmed unread. Both in one transaction, so
   * no entry added or trimmed in between skews them. Each process reports what it finds once.
   */
  private async reportTrimmed(streams: string[]): Promise<void> {
    const replies = await this.link.atomically(streams.flatMap(s => [['XLEN', s], ['XINFO', 'GROUPS', s]]))
    streams.forEach((stream, i) => {
      const lag = groupLag(replies[2 * i + 1], this.settings.group)
      if (lag === undefined) return
      const lost = lag - Number(replies[2 * i])
      const reported = this.reportedLost.get(stream) ?? 0
      if (lost <= reported) return
      this.reportedLost.set(stream, lost)
      this.host.log.error(`${stream}: ${lost - reported} ${reported ? 'more ' : ''}entries were trimmed from the stream before group ${this.settings.group} read them: they are lost. Raise the stream's maxLength or maxAge.`)
    })
  }

  /** The subscribed streams, each with the app's group (created at the stream's first entry, so nothing retained is skipped). */
  private async streams(): Promise<string[]> {
    const streams = this.host.streams()
    for (const stream of streams.filter(s => !this.groups.has(s))) {
      await this.createGroup(stream)
      this.groups.add(stream)
    }
    return streams
  }

  /**
   * Creates the app's group on `stream` unless it exists. On a stream not there yet, the group's read counter starts
   * at 0 (Redis 7's ENTRIESREAD), so that Redis counts every entry the group has not read, trimmed ones included, from
   * the first on (see `reportTrimmed`; without it the count starts at the group's first read). Redis 6 knows no such
   * counter.
   */
  private async createGroup(stream: string): Promise<void> {
    const create = ['XGROUP', 'CREATE', stream, this.settings.group, '0', 'MKSTREAM']
    const fresh = Number(await this.link.send(['EXISTS', stream])) === 0
    try {
      await this.link.send(fresh ? [...create, 'ENTRIESREAD', 0] : create).catch(e => {
        if (!fresh || !isCode(e, 'ERR syntax error')) throw e
        return this.link.send(create) // Redis 6
      })
    } catch (e) {
      if (!isCode(e, 'BUSYGROUP')) throw e
    }
  }

  /** Takes over the entries other consumers (dead ones) received and left unacknowledged for `claimAfter`. */
  private async claimStale(streams: string[]): Promise<void> {
    const { group, consumer, claimAfter } = this.settings
    for (const stream of streams) {
      let cursor = '0-0'
      do {
        const reply = claimReply(await this.link.send(['XAUTOCLAIM', stream, group, consumer, claimAfter, cursor, 'COUNT', COUNT, 'JUSTID']))
        if (reply.claimed.length > 0) this.ownPending = true
        for (const id of reply.deleted) this.lost(stream, id)
        cursor = reply.cursor
      } while (cursor !== '0-0' && !this.stopped)
    }
    this.nextClaim = Date.now() + claimAfter / 2
  }

  /**
   * Handles entries in order and acknowledges each right after it is handled, so a crash leaves at most the entry in
   * hand handled and unacknowledged. (Acknowledgements sent without waiting were not written before the batch ended
   * on SQLite, whose synchronous driver never lets the event loop reach the socket: a consumer killed mid-batch had
   * 97 of 100 entries delivered again.) The first failure ends the batch; its entry stays pending. An entry another
   * consumer claimed meanwhile is left to it.
   */
  private async handleAll(entries: StreamEntry[], readAt: number): Promise<void> {
    if (entries.length === 0) return
    const { group, consumer, claimAfter } = this.settings
    const batch = new OwnedBatch(this.link, group, consumer, claimAfter, entries, readAt)
    try {
      for (const entry of entries) {
        // On shutdown the rest stay pending for this consumer's next run or another consumer (after claimAfter).
        if (this.stopped) return
        if (!(await batch.owns(entry))) {
          this.host.log.warn(`${entry.stream} entry ${entry.id} was claimed by another consumer of group ${group} while this one did not answer for claimAfter: left to it`)
          continue
        }
        await this.handle(entry)
        await this.link.send(['XACK', entry.stream, group, entry.id])
        batch.acknowledged(entry)
      }
    } finally {
      batch.close()
    }
  }

  private async handle(entry: StreamEntry): Promise<void> {
    if (!entry.fields) return this.lost(entry.stream, entry.id)
    let parsed: ReturnType<typeof entryMessage>
    try {
      parsed = entryMessage({ ...entry, fields: entry.fields })
    } catch (e) {
      // It can never be handled: acknowledged, so it does not block the stream, and reported.
      return this.host.log.error(`${entry.stream} entry ${entry.id} is no message and is dropped:`, e)
    }
    if (!(await this.host.accepts(parsed.tenant, this.failures > 0))) return this.host.dropped(entry.stream, parsed.tenant)
    try {
      await this.host.deliver(parsed.message, parsed.tenant)
    } catch (e) {
      if ((e as { code?: string }).code !== 'NO_HANDLER_FOUND') throw e
    }
  }

  private lost(stream: string, id: string): void {
    this.host.log.error(`${stream} entry ${id} was trimmed from the stream before group ${this.settings.group} handled it: it is lost. Raise the stream's maxLength or maxAge.`)
  }

  /** Removes this consumer from its groups where nothing is pending for it (a consumer with pending entries stays, for them to be claimed). */
  private async leaveGroups(): Promise<void> {
    const { group, consumer } = this.settings
    for (const stream of this.groups) {
      const pending = await this.link.send<unknown[]>(['XPENDING', stream, group, '-', '+', 1, consumer])
      if (pending.length === 0) await this.link.send(['XGROUP', 'DELCONSUMER', stream, group, consumer])
    }
  }

  private pause(ms: number): Promise<void> {
    return new Promise(resolve => {
      const timer = setTimeout(resolve, ms)
      this.wakeUp = () => {
        clearTimeout(timer)
        resolve()
      }
    })
  }
}
