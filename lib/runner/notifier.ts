import cds from '@sap/cds'
import { postgresConnectionConfig } from '../cap/database-options'
import { LOG } from '../log'

/** Upper bound for the pause between reconnection attempts; polling covers the time without a listener. */
const MAX_RECONNECT_DELAY = 30_000

/** What the notifier uses of a `pg` client. */
interface ListeningClient {
  connect(): Promise<void>
  query(sql: string): Promise<unknown>
  end(): Promise<void>
  on(event: 'notification', listener: (message: { payload?: string }) => void): void
  on(event: 'error', listener: (error: Error) => void): void
  on(event: 'end', listener: () => void): void
  removeAllListeners(): void
}
type ClientClass = new (config: Record<string, unknown>) => ListeningClient

/**
 * Wakes the runner when another process commits a new message: a dedicated database connection (outside the pool,
 * so a long-lived LISTEN never occupies a pooled one) listens for the signal the store sends in every enqueuing
 * transaction. If the connection drops, it reconnects with backoff; the runner's polling covers the gap, and every
 * (re)connect wakes the runner once for what was signalled meanwhile.
 */
export class Notifier {
  private client: ListeningClient | undefined
  private timer: NodeJS.Timeout | undefined
  private failures = 0
  private stopped = true

  constructor(
    private readonly listen: string,
    /** `payload`: what the notification said (none when the runner is woken after a reconnect). */
    private readonly wake: (payload?: string) => void
  ) {}

  start(): void {
    this.stopped = false
    void this.connect()
  }

  async stop(): Promise<void> {
    this.stopped = true
    clearTimeout(this.timer)
    const client = this.client
    this.client = undefined
    await client?.end().catch(() => undefined)
  }

  private async connect(): Promise<void> {
    let client: ListeningClient | undefined
    try {
      const { Client } = require('pg') as { Client: ClientClass }
      client = this.client = new Client(postgresConnectionConfig(cds.db))
      const current = client
      current.on('error', error => this.dropped(current, error))
      current.on('end', () => this.dropped(current))
      current.on('notification', message => this.wake(message.payload))
      await current.connect()
      await current.query(this.listen)
    } catch (e) {
      return this.dropped(client, e)
    }
    if (this.stopped || this.client !== client) return
    if (this.failures) LOG.info(`listening for new messages again after ${this.failures} failed attempts`)
    this.failures = 0
    this.wake()
  }

  /** The listening connection failed or closed: reconnect later, once per connection, unless stopping. */
  private dropped(client: ListeningClient | undefined, error?: unknown): void {
    if (this.stopped || this.client !== client) return
    this.client = undefined
    client?.removeAllListeners()
    client?.on('error', () => undefined)
    client?.end().catch(() => undefined)
    this.failures++
    const delay = Math.min(MAX_RECONNECT_DELAY, 100 * 2 ** this.failures)
    const log = this.failures === 1 ? LOG.warn : LOG.debug
    log(`the connection listening for new messages was lost, reconnecting in ${delay} ms; polling meanwhile:`, error ?? 'connection closed')
    clearTimeout(this.timer)
    this.timer = setTimeout(() => void this.connect(), delay)
    this.timer.unref()
  }
}
