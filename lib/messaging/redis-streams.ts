import cds from '@sap/cds'
import os from 'os'
import { appName } from '../app-name'
import { whenListening } from '../cap/lifecycle'
import { deliverInbound, listensToAll, outbound, subscribedTopics } from '../cap/messaging'
import { MessagingService } from '../cap/messaging-service'
import type { Raw } from '../config/values'
import { compileRedisStreams } from './redis-streams-config'
import type { RedisStreamsSettings } from '../interfaces'
import { eventQueues } from '../plugin'
import { registerAvailability } from './availability'
import { publishAll, type OutboundMessage } from './batch-publisher'
import { RedisLink } from './redis-link'
import { StreamConsumer } from './stream-consumer'
import { TenantDrops } from './tenant-drops'
import { entryFields, xaddArguments } from './stream-entries'

/**
 * `kind: 'redis-streams'`: a CAP messaging service on Redis Streams, an at-least-once broker. Publishing appends an
 * entry to the topic's stream (XADD), which Redis keeps until the stream's bound trims it, whether anyone listens or
 * not; each app consumes as one consumer group, so its instances share the entries, and acknowledges an entry only
 * after its effect committed (lib/messaging/stream-consumer.ts). Configured and used like CAP's `redis-messaging`.
 */

/** How long `cds.connect.to` waits for Redis at start; then the app starts anyway and the connection follows. */
const CONNECT_WAIT = 3000

/** The most entries one read takes, whatever its bound in bytes. */
const MAX_ENTRIES_PER_READ = 100

/**
 * How many entries one read may take: as many of the largest messages the service's queue accepts
 * (`maxMessageSize`; the inbox refuses larger ones) as fit the bytes the queue's claims hold at once (`maxClaimBytes`),
 * so a consumer's memory stays bounded as the runner's does: 8 with the defaults (32 MiB, 4 MiB).
 */
function entriesPerRead(service: string): number {
  const { settings } = eventQueues()
  const bytes = settings.runner.maxClaimBytes
  const largest = settings.queues.queueOfService(service).maxMessageSize
  return Math.max(1, Math.min(MAX_ENTRIES_PER_READ, Math.floor(bytes / largest)))
}

export default class RedisStreamsMessaging extends MessagingService {
  private settings!: RedisStreamsSettings
  private publisher!: RedisLink
  private consumer: StreamConsumer | undefined
  private readonly log = cds.log('redis-streams|messaging')

  override async init(): Promise<void> {
    await super.init()
    this.settings = compileRedisStreams(this.options as Raw, `cds.requires.${this.name}`, {
      group: appName(),
      consumer: `${os.hostname()}:${process.pid}`
    })
    this.publisher = new RedisLink(this.settings.url, `${this.name} (Redis ${this.settings.endpoint})`, this.log, true, this.settings.commandTimeout)
    // the relay waits while Redis is away, and goes on when the publishing connection is available again
    registerAvailability(this, this.publisher)
    whenListening(() => this.listen())
    cds.on('shutdown', () => this.close())
    await this.publisher.open(CONNECT_WAIT)
  }

  override async handle(msg: object): Promise<unknown> {
    if ((msg as { inbound?: boolean }).inbound) return super.handle(msg)
    await this.publish(msg, cds.context?.tenant ?? undefined)
    return undefined
  }

  /**
   * The relay's batches (lib/runner/relay.ts): each message as `handle` publishes it, their XADDs issued in one go, which
   * the client writes to the connection together (node-redis sends the commands of a tick in one write): one round
   * trip. Redis answers each XADD on its own, in order, so a refused entry fails its message only; a lost connection
   * fails every message not answered yet.
   */
  [publishAll](messages: OutboundMessage[]): Promise<void>[] {
    const tenant = cds.context?.tenant ?? undefined
    return messages.map(msg => this.publish(msg, tenant))
  }

  /** Appends `msg` to its topic's stream, in `tenant`. */
  private async publish(msg: object, tenant: string | undefined): Promise<void> {
    const message = outbound(this, msg)
    // Fails at once with BrokerUnavailable while Redis is away: the queue's relay waits for it without an attempt.
    await this.publisher.send(['XADD', message.event, ...xaddArguments(this.settings.trim, entryFields(message, tenant))])
  }

  /** Starts consuming once the app serves: its subscriptions are registered by then. */
  private listen(): void {
    if (listensToAll(this)) this.log.warn(`${this.name}: a subscription to '*' is not supported by redis-streams (a stream per topic): subscribe to topics`)
    const reader = new RedisLink(this.settings.url, `${this.name} (Redis ${this.settings.endpoint}, consumer)`, this.log, false, this.settings.commandTimeout)
    const drops = new TenantDrops(this.name, this.log)
    const { tenants } = eventQueues().runner
    this.consumer = new StreamConsumer(reader, this.settings, {
      streams: () => subscribedTopics(this),
      accepts: (tenant, fresh) => tenants.accepts(tenant, fresh),
      deliver: (message, tenant) => deliverInbound(this, tenant, message),
      dropped: (stream, tenant) => drops.dropped(stream, tenant),
      log: this.log
    }, { entriesPerRead: entriesPerRead(this.name) })
    void reader.open(0)
    this.consumer.start()
  }

  /**
   * On shutdown: the consumer first (no entry is taken any more), then the publisher once the runner has stopped — it
   * lets the relays that run finish within shutdownGrace, and they need the connection until then.
   */
  private async close(): Promise<void> {
    await this.consumer?.stop()
    await eventQueues().runner.stop()
    await this.publisher.close()
  }
}
