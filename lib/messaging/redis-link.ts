import { reconnectDelay } from '../time/backoff'
import type { BrokerAvailability } from '../interfaces'
import { BrokerUnavailable } from './availability'

/**
 * One connection to Redis through the npm package `redis` (the client CAP's Redis adapter uses; an optional peer
 * dependency of the plugin). It reconnects with backoff for as long as the app runs and never lets a connection error
 * reach the process: a lost connection is one warning, its return one info line. Every command it sends fails with
 * `BrokerUnavailable` when Redis is away (not connected, the connection lost, no answer within the command timeout, a
 * reply that says Redis cannot serve now), and with Redis's own error when Redis refuses the command itself.
 *
 * A Redis that does not answer (frozen, or a network partition: the socket stays open) is unavailable from the first
 * command that went unanswered for `commandTimeout` until any reply arrives again: meanwhile commands fail at once, and
 * a PING waits for the answer (node-redis matches replies to commands in order, so a late reply is read and dropped,
 * never taken for another command's). A command that timed out may still be carried out when Redis goes on: a relay
 * is at least once, and the consumer's inbox drops the second copy by its ID.
 */

/**
 * Longest pause between reconnection attempts: a broker that is back is found within a second, and the relay's events
 * that waited for it go on (docs/MESSAGING.md#when-the-broker-is-away); an attempt while Redis is down costs a refused connection.
 */
const MAX_RECONNECT_DELAY = 1000

/** Redis's replies to credentials it does not take: a wrong password or user, none given, one it does not expect. */
const REFUSED_CREDENTIALS = /^(WRONGPASS|NOAUTH|ERR AUTH)\b/
/** A refusal of the credentials is an error for an operator to fix, said again while it lasts, at most this often. */
const REFUSAL_REPEAT = 60_000
/** When the refusal of a URL's credentials was last said: the links of one service (and of services bound alike) share it. */
const refusalsSaid = new Map<string, number>()

/** What the link uses of a node-redis client (v4 to v6 alike): raw commands only (replies read in lib/messaging/stream-entries.ts). */
interface Client {
  readonly isReady: boolean
  connect(): Promise<unknown>
  sendCommand(args: string[]): Promise<unknown>
  multi(): { addCommand(args: string[]): unknown; exec(): Promise<unknown[]> }
  on(event: 'error', listener: (error: Error) => void): unknown
  on(event: 'ready', listener: () => void): unknown
  destroy?(): void
  disconnect?(): Promise<void>
}
interface RedisModule {
  createClient(options: Record<string, unknown>): Client
  /** The class of Redis's error replies (node-redis 4.1 and later). */
  ErrorReply?: new (...args: never[]) => Error
}

export interface LinkLog {
  error(...args: unknown[]): void
  warn(...args: unknown[]): void
  info(...args: unknown[]): void
  debug(...args: unknown[]): void
}

/** The first word of an error reply by which Redis says it cannot serve now, whatever the command (not a refusal of it). */
const UNAVAILABLE_REPLIES = new Set(['LOADING', 'BUSY', 'MASTERDOWN', 'READONLY', 'TRYAGAIN', 'CLUSTERDOWN', 'NOAUTH', 'OOM'])

/** Whether node-redis rejected with an error reply of Redis (else the client failed: not connected, the connection lost). */
const isErrorReply = (module: RedisModule, e: unknown) => !!module.ErrorReply && e instanceof module.ErrorReply

function redisModule(): RedisModule {
  try {
    return require('redis') as RedisModule
  } catch (e) {
    throw new Error("cds.requires kind 'redis-streams' needs the npm package 'redis' in the app: npm add redis", { cause: e })
  }
}

export class RedisLink implements BrokerAvailability {
  private readonly module = redisModule()
  private readonly client: Client
  private failures = 0
  private closed = false
  /** Since when a command has gone unanswered for the command timeout (epoch ms); undefined: Redis answers. */
  private silentSince: number | undefined
  private readonly listeners = new Set<() => void>()

  /**
   * `what` names the connection in log lines (service and role, Redis's host and port; never the URL, which may
   * hold a password). `failFast`: commands fail at once while disconnected instead of waiting for the connection, so
   * that a relay waits for the broker in the queue, not in a client buffer. `commandTimeout` (ms): how long a command
   * may go unanswered (beyond the time it blocks by itself) before Redis counts as unavailable.
   */
  constructor(private readonly url: string, private readonly what: string, private readonly log: LinkLog, private readonly failFast: boolean, private readonly commandTimeout: number) {
    this.client = this.module.createClient({
      url,
      disableOfflineQueue: failFast,
      socket: { reconnectStrategy: (retries: number) => reconnectDelay(retries + 1, MAX_RECONNECT_DELAY) }
    })
    this.client.on('error', error => this.failed(error))
    this.client.on('ready', () => this.recovered())
  }

  /**
   * Connects, and resolves once connected or after `wait` ms (then it goes on connecting in the background). Commands
   * sent meanwhile on a link that does not fail fast are sent once connected.
   */
  async open(wait: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined
    const connected = this.client.connect().catch(() => undefined)
    if (wait <= 0) return
    await Promise.race([connected, new Promise(resolve => (timer = setTimeout(resolve, wait)))])
    clearTimeout(timer)
    if (!this.client.isReady && !this.closed) this.log.warn(`${this.what}: not connected yet, connecting in the background`)
  }

  get ready(): boolean {
    return this.client.isReady
  }

  /** Connected, and Redis answers. */
  get available(): boolean {
    return this.client.isReady && this.silentSince === undefined
  }

  /** Calls `listener` whenever Redis is available again: connected again, or answering again. */
  onAvailable(listener: () => void): () => void {
    this.listeners.add(listener)
    return () => this.listeners.delete(listener)
  }

  /**
   * Sends a raw command; `blocks` (ms): how long the command itself may wait in Redis (XREADGROUP's BLOCK), on top of
   * the command timeout. Fails with BrokerUnavailable while Redis does not answer, and while a fail-fast link is
   * disconnected.
   */
  async send<T>(args: (string | number)[], blocks = 0): Promise<T> {
    if (this.silentSince !== undefined) throw new BrokerUnavailable(`${this.what}: Redis has not answered since ${new Date(this.silentSince).toISOString()}`)
    if (this.failFast && !this.client.isReady) throw new BrokerUnavailable(`${this.what}: not connected to Redis (reconnecting)`)
    const reply = this.client.sendCommand(args.map(String)) as Promise<T>
    let timer: NodeJS.Timeout | undefined
    const silence = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(this.unanswered(reply)), this.commandTimeout + blocks)
    })
    try {
      return await Promise.race([reply, silence])
    } catch (e) {
      throw this.classified(e)
    } finally {
      clearTimeout(timer)
    }
  }

  /**
   * Sends raw commands as one transaction (MULTI … EXEC): no other client's command runs between them. Fails with the
   * first command's error where one failed.
   */
  async atomically<T extends unknown[]>(commands: (string | number)[][]): Promise<T> {
    const transaction = this.client.multi()
    for (const args of commands) transaction.addCommand(args.map(String))
    try {
      return (await transaction.exec()) as T
    } catch (e) {
      const { replies, errorIndexes } = e as { replies?: unknown[]; errorIndexes?: number[] }
      throw replies && errorIndexes?.length ? replies[errorIndexes[0]] : e
    }
  }

  /** A failed command's error: BrokerUnavailable unless Redis itself refused the command. */
  private classified(e: unknown): unknown {
    if (e instanceof BrokerUnavailable) return e
    if (isErrorReply(this.module, e) && !UNAVAILABLE_REPLIES.has((e as Error).message.split(' ')[0])) return e
    const reason = e instanceof Error ? e.message : String(e)
    return new BrokerUnavailable(`${this.what}: ${reason}`, { cause: e })
  }

  /**
   * `reply` went unanswered for the command timeout: Redis counts as unavailable until a reply comes — this one, or
   * a PING's sent after it (node-redis reconnects, and the link is ready again, if the connection breaks instead).
   */
  private unanswered(reply: Promise<unknown>): BrokerUnavailable {
    // not connected (a command of a link that does not fail fast waits for the connection): node-redis reconnects
    if (!this.client.isReady) return new BrokerUnavailable(`${this.what}: not connected to Redis (reconnecting)`)
    if (this.silentSince === undefined && !this.closed) {
      this.silentSince = Date.now()
      this.log.warn(`${this.what}: Redis did not answer within ${this.commandTimeout} ms; waiting for it to answer`)
      const answered = () => this.answered()
      reply.then(answered, () => undefined)
      ;(this.client.sendCommand(['PING']) as Promise<unknown>).then(answered, () => undefined)
    }
    return new BrokerUnavailable(`${this.what}: Redis did not answer within ${this.commandTimeout} ms`)
  }

  private answered(): void {
    if (this.silentSince === undefined || this.closed) return
    this.log.info(`${this.what}: Redis answers again after ${Date.now() - this.silentSince} ms`)
    this.silentSince = undefined
    this.tellAvailable()
  }

  private tellAvailable(): void {
    if (!this.available) return
    for (const listener of [...this.listeners]) listener()
  }

  /** Closes the connection at once; commands in flight fail. */
  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    this.listeners.clear()
    if (this.client.destroy) this.client.destroy()
    else await this.client.disconnect?.().catch(() => undefined)
  }

  private failed(error: Error): void {
    if (this.closed) return
    this.failures++
    const refusal = REFUSED_CREDENTIALS.exec(error.message)?.[1]
    if (refusal) return this.refused(refusal)
    const reason = (error as { code?: string }).code ?? error.message
    if (this.failures === 1) this.log.warn(`${this.what}: connection lost or refused (${reason}); reconnecting with backoff`)
    else this.log.debug(`${this.what}: reconnection attempt ${this.failures} failed (${reason})`)
  }

  /** Redis's reply names the refusal only (never the password); the line says where to fix it. */
  private refused(reply: string): void {
    const said = refusalsSaid.get(this.url)
    if (said !== undefined && Date.now() - said < REFUSAL_REPEAT) {
      this.log.debug(`${this.what}: reconnection attempt ${this.failures} failed (${reply})`)
      return
    }
    refusalsSaid.set(this.url, Date.now())
    this.log.error(`${this.what}: Redis refused the credentials (${reply}): check the password in the service's credentials ` +
      '(its binding); retrying with backoff, this error repeats at most once a minute')
  }

  private recovered(): void {
    refusalsSaid.delete(this.url)
    if (this.failures) this.log.info(`${this.what}: connected again after ${this.failures} failed attempts`)
    this.failures = 0
    // a new connection answers: whatever went unanswered on the old one is gone with it
    this.silentSince = undefined
    this.tellAvailable()
  }
}
