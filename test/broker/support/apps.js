const os = require('os')
const { newDatabaseFile, onPostgres } = require('../../support/app')
const { startInstance, stopInstance } = require('../../support/instances')
const { waitFor } = require('../../support/wait')

/**
 * The end-to-end suite's two apps, producer and consumer (producer.js, consumer.js), each in a process of its own
 * with a database of its own of the project's kind (a SQLite file, or a database of the run's PostgreSQL server), and
 * what the test reads from their databases and from Redis. Processes are started and stopped by their PID.
 */

/**
 * `cds.requires.db` of a new database of the project's kind. On PostgreSQL the pool waits up to 10 s for a connection:
 * a first connection to a database just created took longer than the default 1 s on the loaded machine, and the
 * deployment failed (as test/support/app.js notes for the in-process suites).
 */
async function newDatabase() {
  if (!onPostgres()) return { kind: 'sqlite', credentials: { url: newDatabaseFile() } }
  const postgres = require('../../support/postgres')
  const name = postgres.newDatabaseName()
  await postgres.createDatabase(name)
  const db = postgres.dbConfig(name)
  return { ...db, pool: { ...db.pool, acquireTimeoutMillis: 10000 } }
}

/** Runs `sql` on `database` (as newDatabase returned it) and resolves to its rows. */
async function query(database, sql) {
  if (database.kind === 'postgres') {
    return require('../../support/postgres').withClient(async client => (await client.query(sql)).rows, database.credentials.database)
  }
  const db = new (require('better-sqlite3'))(database.credentials.url, { readonly: true, timeout: 5000 })
  try {
    return db.prepare(sql).all()
  } finally {
    db.close()
  }
}

/** Order numbers of the test_Records rows of `kind`, one per row (duplicates kept), and the CloudEvents ids of those received. */
async function records(database, kind) {
  const rows = await query(database, `SELECT message AS "n", note AS "id" FROM test_Records WHERE kind = '${kind}'`)
  return rows.map(r => ({ n: Number(r.n), id: r.id }))
}

/** Rows left in the app's queue table. */
async function queued(database) {
  const [row] = await query(database, 'SELECT CAST(COUNT(*) AS INTEGER) AS "count" FROM cds_outbox_Messages')
  return Number(row.count)
}

/**
 * The broker service of both apps: redis-streams on the suite's server (by `credentials.uri`; without `redis`, from
 * the binding in the process's VCAP_SERVICES, as on SAP BTP); the consumer's is inboxed.
 */
function brokerConfig(redis, own = {}) {
  const credentials = redis ? { credentials: { uri: redis.url } } : {}
  return { broker: { kind: 'redis-streams', ...credentials, format: 'cloudevents', claimAfter: '2s', ...own } }
}

/**
 * Queue options of both apps: short leases (a killed producer's claims are taken over after 2 s), quick retries, and
 * batches of 10: a relay attempt is a broker round trip (10 ms and more with Redis fsyncing every write, on the loaded
 * 2-core machine), so a batch of 50 took its first few within its 100 ms and handed the rest back; in one run 26,422
 * hand-backs for 2,000 relays, whose writes slowed the relay to a crawl. With retries at most 1 s apart, the default
 * 10 attempts span about 7 s, less than the Redis outage (5 s, its restart, and the link's reconnection backoff of up
 * to 10 s): on PostgreSQL one event needed 9 retries in a passing run, and in a CI run the outage test waited until
 * its time-out, most likely for an event that had become a dead letter. 60 attempts ride out a minute.
 */
const QUEUE = { timeout: '2s', pollInterval: '500ms', backoff: { base: '100ms', factor: 2, max: '1s' }, batchSize: 10, maxAttempts: 60 }

/**
 * `queue`: queue options instead of the suite's (QUEUE); `broker`: options of the broker service beside brokerConfig's;
 * `env`: the process's environment beside the suite's (e.g. CDS_LOG_LEVELS_QUEUE: 'info', to read the queue's log; a
 * binding in VCAP_SERVICES and NODE_EXTRA_CA_CERTS).
 */
function startProducer(database, redis, { deploy = false, queue = QUEUE, broker = {}, env } = {}) {
  return startInstance(database, { name: 'producer', script: '../broker/support/producer.js', deploy, queue, requires: brokerConfig(redis, broker), env })
}

/** `execArgv`: Node's options for the consumer's process (e.g. a small container's heap); `queue`, `env`: as for the producer. */
function startConsumer(database, redis, { deploy = false, execArgv, queue = QUEUE, env } = {}) {
  return startInstance(database, { name: 'consumer', script: '../broker/support/consumer.js', deploy, execArgv, queue, requires: brokerConfig(redis, { inboxed: true }), env })
}

/** The consumer's name in its group: redis-streams names a process by host and PID. */
const consumerName = child => `${os.hostname()}:${child.pid}`

/** Kills a process with SIGKILL, by its PID, and waits until it is gone. */
async function kill(child) {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise(resolve => child.once('exit', resolve))
  process.kill(child.pid, 'SIGKILL')
  await exited
}

/** Starts the producer's business transactions (see producer.js). */
async function placeOrders(producer, { from = 0, count, perTx = 10, rollbackEvery = 6 }) {
  const res = await fetch(`${producer.url}/orders`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ from, count, perTx, rollbackEvery }) })
  if (res.status !== 202) throw new Error(`POST /orders answered ${res.status}: ${await res.text()}`)
}

/** How far the producer's business transactions are: { done, committed, error }. */
const placing = async producer => (await fetch(`${producer.url}/orders`)).json()

/** Waits until the producer placed all orders; resolves with the number committed. */
async function ordersPlaced(producer) {
  const { committed, error } = await waitFor(async () => {
    const progress = await placing(producer)
    return progress.done && progress
  }, { timeout: 600000, interval: 250, what: 'the producer to place its orders' })
  if (error) throw new Error(`placing orders failed: ${error}`)
  return committed
}

/** The redeliveries and re-publishes the consumer's inbox dropped by their ID (its receipts' count, issue 23). */
async function duplicatesDropped(database) {
  const [row] = await query(database, 'SELECT SUM(duplicates) AS "dropped" FROM cds_outbox_Receipts')
  return Number(row?.dropped ?? 0)
}

const relayStats = async producer => (await fetch(`${producer.url}/relay-stats`)).json()

/** Queues `count` calls of the producer's local service (Target, on the same queue as the broker's relays); see producer.js. */
async function callLocalService(producer, count) {
  const res = await fetch(`${producer.url}/local`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ count }) })
  if (res.status !== 200) throw new Error(`POST /local answered ${res.status}: ${await res.text()}`)
}

/** The producer's dead letters: rows at or over its queue's maxAttempts. */
async function deadLetters(database, maxAttempts) {
  const [row] = await query(database, `SELECT CAST(COUNT(*) AS INTEGER) AS "count" FROM cds_outbox_Messages WHERE attempts >= ${maxAttempts}`)
  return Number(row.count)
}

/**
 * Waits until the consumer has handled every committed order, both queue tables are empty and nothing is pending in
 * the consumer's group: nothing more can arrive. Resolves with when that was; on a time-out, says what it last saw.
 */
async function settled({ producerDb, consumerDb, redisClient, producer, timeout = 300000 }) {
  let last
  try {
    await waitFor(async () => {
      const [committed, received] = await Promise.all([records(producerDb, 'order'), records(consumerDb, 'received')])
      const [producerQueue, consumerQueue] = await Promise.all([queueRows(producerDb), queueRows(consumerDb)])
      const [pending] = await redisClient.sendCommand(['XPENDING', 'orders/created', 'event-queues-test-app'])
      const distinct = new Set(received.map(r => r.n))
      last = { committed: committed.length, received: distinct.size, producerQueue, consumerQueue, pendingInRedis: Number(pending) }
      return distinct.size >= committed.length && producerQueue.length + consumerQueue.length === 0 && Number(pending) === 0
    }, { timeout, interval: 250, what: 'every committed order received, both queues empty, nothing pending in Redis' })
  } catch (e) {
    // what it last saw says which part never settled; the producer's relay attempts say whether any became dead letters
    const relay = producer && (await relayStats(producer).catch(error => error.message))
    e.message += `; last seen: ${JSON.stringify({ ...last, relay }, null, 1)}`
    throw e
  }
  return Date.now()
}

/** The rows left in the app's queue table, by what a stuck relay or inbox would show. */
const queueRows = database => query(database, 'SELECT target AS "target", status AS "status", attempts AS "attempts", lastError AS "lastError", claimedBy AS "claimedBy", dueAt AS "dueAt" FROM cds_outbox_Messages ORDER BY timestamp LIMIT 20')

module.exports = {
  brokerConfig,
  QUEUE,
  newDatabase, query, records, queued, duplicatesDropped, startProducer, startConsumer, stopInstance, consumerName, kill, placeOrders, placing, ordersPlaced, relayStats, settled,
  callLocalService, deadLetters
}
