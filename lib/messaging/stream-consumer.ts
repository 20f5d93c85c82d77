import type { RedisStreamsSettings } from '../interfaces'
import { reconnectDelay } from '../time/backoff'
import type { LinkLog, RedisLink } from './redis-link'
import type { BrokerMessage } from '../cap/messaging'
import { claimReply, entryMessage, readReply, type StreamEntry } from './stream-entries'

/**
 * The consuming side of a `redis-streams` service: this process as a consumer of its app's group on every subscribed
 * stream. It reads new entries (XREADGROUP `>`), hands each to the subscribers and acknowledges it (XACK) only after
 * its effect committed; entries it received and did not acknowledge (a failure, a crash before XACK) stay pending and
 * are read again (XREADGROUP `0`: this consumer's pending entries), by this process after a backoff or, once they are
 * `claimAfter` old, by whichever consumer of the group claims them (XAUTOCLAIM). Entries are handled one at a time in
 * stream order; a failure stops the batch, so a failing entry holds back the later ones of this consumer until it
 * succeeds.
 */

/** How long a read waits for new entries: also the longest a shutdown waits for the read in progress. */
const BLOCK_MS = 1000
/** Entries per read and per claim. */
const COUNT = 100
/** Longest pause after failed passes (broker or database unreachable, a subscriber failing). */
const MAX_RETRY_DELAY = 10_000
/** How long a shutdown waits for the pass in progress (a read, the entries of a batch) before closing the connection. */
const STOP_WAIT = 15_000

export interface ConsumerHost {
  /** The streams to read: the subscribed topics, asked on every pass, so subscriptions made later are read too. */
  streams(): string[]
  /** Hands a message to the subscribers; resolves once its effect (inbox row, handler's writes) committed. */
  deliver(message: BrokerMessage, tenant: string | undefined): Promise<void>
  log: LinkLog & { error(...args: unknown[]): void }
}

const isCode = (e: unknown, code: string) => e instanceof Error && e.message.startsWith(code)

export class StreamConsumer {
  private readonly groups = new Set<string>()
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
    private readonly host: ConsumerHost
  ) {}

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
        if (isCode(e, 'NOGROUP')) this.groups.clear() // Redis lost its data (restarted without persistence)
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
    const { group, consumer } = this.settings
    const reply = await this.link.send([
      'XREADGROUP', 'GROUP', group, consumer, 'COUNT', COUNT, ...(history ? [] : ['BLOCK', BLOCK_MS]),
      'STREAMS', ...streams, ...streams.map(() => (history ? '0' : '>'))
    ])
    const entries = readReply(reply)
    if (history && entries.length === 0) this.ownPending = false
    await this.handleAll(entries)
  }

  /** The subscribed streams, each with the app's group (created at the stream's first entry, so nothing retained is skipped). */
  private async streams(): Promise<string[]> {
    const streams = this.host.streams()
    for (const stream of streams.filter(s => !this.groups.has(s))) {
      try {
        await this.link.send(['XGROUP', 'CREATE', stream, this.settings.group, '0', 'MKSTREAM'])
      } catch (e) {
        if (!isCode(e, 'BUSYGROUP')) throw e
      }
      this.groups.add(stream)
    }
    return streams
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
   * 97 of 100 entries delivered again.) The first failure ends the batch; its entry stays pending.
   */
  private async handleAll(entries: StreamEntry[]): Promise<void> {
    for (const entry of entries) {
      // On shutdown the rest stay pending for this consumer's next run or another consumer (after claimAfter).
      if (this.stopped) return
      await this.handle(entry)
      await this.link.send(['XACK', entry.stream, this.settings.group, entry.id])
    }
  }

  private async handle(entry: StreamEntry): Promise<void> {
    if (!entry.fields) return this.lost(entry.stream, entry.id)
    let parsed: ReturnType<typeof entryMessage>
    try {
      parsed = entryMessage({ ...entry, fields: entry.fields })
    } catch (e) {
      // It can never be handled: acknowledged, so it does not hold back the stream, and reported.
      return this.host.log.error(`${entry.stream} entry ${entry.id} is no message and is dropped:`, e)
    }
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
