import { reconnectDelay } from '../time/backoff'

/**
 * One connection to Redis through the npm package `redis` (the client CAP's Redis adapter uses; an optional peer
 * dependency of the plugin). It reconnects with backoff for as long as the app runs and never lets a connection error
 * reach the process: a lost connection is one warning, its return one info line.
 */

/** Longest pause between reconnection attempts. */
const MAX_RECONNECT_DELAY = 10_000

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
}

export interface LinkLog {
  warn(...args: unknown[]): void
  info(...args: unknown[]): void
  debug(...args: unknown[]): void
}

export class BrokerUnavailable extends Error {
  readonly code = 'BROKER_UNAVAILABLE'
}

function redisModule(): RedisModule {
  try {
    return require('redis') as RedisModule
  } catch (e) {
    throw new Error("cds.requires kind 'redis-streams' needs the npm package 'redis' in the app: npm add redis", { cause: e })
  }
}

export class RedisLink {
  private readonly client: Client
  private failures = 0
  private closed = false

  /**
   * `what` names the connection in log lines (service and role, Redis's host and port; never the URL, which may
   * hold a password). `failFast`: commands fail at once while disconnected instead of waiting for the connection, so
   * that a relay attempt fails and is retried by the queue.
   */
  constructor(url: string, private readonly what: string, private readonly log: LinkLog, failFast: boolean) {
    this.client = redisModule().createClient({
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

  /** Sends a raw command; fails fast with BrokerUnavailable while a fail-fast link is disconnected. */
  send<T>(args: (string | number)[]): Promise<T> {
    return this.client.sendCommand(args.map(String)) as Promise<T>
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

  /** Throws BrokerUnavailable while disconnected. */
  assertReady(): void {
    if (!this.client.isReady) throw new BrokerUnavailable(`${this.what}: not connected to Redis (reconnecting)`)
  }

  /** Closes the connection at once; commands in flight fail. */
  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    if (this.client.destroy) this.client.destroy()
    else await this.client.disconnect?.().catch(() => undefined)
  }

  private failed(error: Error): void {
    if (this.closed) return
    this.failures++
    const reason = (error as { code?: string }).code ?? error.message
    if (this.failures === 1) this.log.warn(`${this.what}: connection lost or refused (${reason}); reconnecting with backoff`)
    else this.log.debug(`${this.what}: reconnection attempt ${this.failures} failed (${reason})`)
  }

  private recovered(): void {
    if (this.failures) this.log.info(`${this.what}: connected again after ${this.failures} failed attempts`)
    this.failures = 0
  }
}
