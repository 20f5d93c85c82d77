import cds from '@sap/cds'
import { postgresConnectionConfig } from '../cap/database-options'
import { executeOnPostgres, type Result } from '../cap/drivers'

import { LOG } from '../log'

/** What the side connection uses of a `pg` client. */
interface Client {
  connect(): Promise<void>
  end(): Promise<void>
  on(event: 'error' | 'end', listener: (error?: Error) => void): void
}
type ClientClass = new (config: Record<string, unknown>) => Client

/**
 * A database connection of the runner's own, outside CAP's pool, for statements that must not wait for a pooled
 * connection: the renewals of running handlers' leases. The handler slots may hold every pooled connection (ten slots,
 * a pool of ten) while their handlers wait for slow remote calls; a renewal queued behind them would let the leases
 * expire and another instance run the messages a second time. PostgreSQL only (SQLite has one connection and one
 * writer anyway). Connects on first use; a failed connection is replaced on the next statement.
 */
export class SideConnection {
  private client: Promise<Client> | undefined

  /** Runs one statement (in a transaction of its own) and returns its rows. */
  async run(sql: string, params: unknown[]): Promise<Result> {
    const client = await (this.client ??= this.connect())
    try {
      return await executeOnPostgres(client, sql, params)
    } catch (e) {
      this.drop(client)
      throw e
    }
  }

  private async connect(): Promise<Client> {
    const { Client } = require('pg') as { Client: ClientClass }
    const client = new Client(postgresConnectionConfig(cds.db))
    client.on('error', error => {
      LOG.warn('the runner\'s own database connection failed; it is replaced on next use:', error)
      this.drop(client)
    })
    try {
      await client.connect()
    } catch (e) {
      this.client = undefined
      throw e
    }
    return client
  }

  private drop(client: Client): void {
    this.client = undefined
    void client.end().catch(() => undefined)
  }

  async close(): Promise<void> {
    const client = this.client
    this.client = undefined
    await (await client?.catch(() => undefined))?.end().catch(() => undefined)
  }
}
