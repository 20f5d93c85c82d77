const fs = require('fs')
const os = require('os')
const path = require('path')
const { randomBytes } = require('crypto')
const { plan: makePlan } = require('./plan')
const { random } = require('./random')
const { sqliteDatabase, postgresDatabase } = require('./database')
const { Fleet } = require('./processes')
const { History } = require('./history')
const driver = require('./driver')
const faults = require('./faults')
const operators = require('./operators')
const { settle } = require('./settle')
const state = require('./state')
const { users } = require('./variants')
const { merged, ms } = require('./queues')
const { requires: APP } = require('./app/package.json').cds
const { killClis } = require('./client')
const consumerSide = require('./consumer-side')
const redis = require('./redis')
const { now } = require('./app/srv/true-clock')

/**
 * One seed, end to end: its plan, a database and app processes of its variant, the fault phase (workload, faults and
 * operators at the plan's times), settling, and the history the invariants are checked on.
 */

const GRACE = ms(APP.queue.shutdownGrace)
const SAMPLE_EVERY = 1000
/**
 * A seed that has not settled by then is given up: its processes are killed and it fails. Settling itself gives up
 * after 4 min (settle.js); this covers requests and CLI runs that a thrashing system answers only after minutes.
 */
const SEED_LIMIT = 12 * 60_000

/** CDS_CONFIG of the app processes (and of the CLI beside them). */
function configOf(ctx) {
  const { plan, database } = ctx
  // no busy timeout of its own: the app and the CLI wait for each other as the plugin sets them up (a user sets none)
  const db = { ...database.config }
  const queue = { store: plan.variant.store, ...(ctx.maxAttempts ? { maxAttempts: ctx.maxAttempts } : {}) }
  const requires = merged(plan.requires, { db, queue: merged(plan.requires.queue, queue), auth: { kind: 'mocked', users: users(plan.variant) } })
  requires.broker = consumerSide.producerBroker(ctx)
  if (plan.variant.tenants) requires.multitenancy = true
  return { requires }
}

const DISPATCH = {
  enqueue: driver.enqueue,
  import: driver.importRows,
  schedule: driver.schedule,
  unschedule: driver.schedule,
  legacyTask: driver.legacyTask,
  unsubscribe: driver.unsubscribe,
  kill: faults.kill,
  terminate: faults.terminate,
  skew: faults.skew,
  pgRestart: faults.pgRestart,
  maxAttempts: faults.changeMaxAttempts,
  operator: operators.operate,
  observe: operators.observe,
  credit: consumerSide.credit,
  pause: faults.pause,
  consumerKill: faults.consumerKill,
  brokerFreeze: faults.brokerFreeze,
  brokerKill: faults.brokerKill,
  brokerPassword: faults.brokerPassword
}

async function setup(ctx) {
  // multitenant: MTX deploys its own tenant at start and each tenant at subscription
  if (!ctx.plan.variant.tenants) await ctx.fleet.deploy()
  if (ctx.consumers) await ctx.consumers.deploy()
  const consumers = ctx.plan.consumer?.slots ?? []
  const started = await Promise.all([...ctx.plan.slots.map(slot => ctx.fleet.start(slot)), ...consumers.map(slot => ctx.consumers.start(slot))])
  if (started.some(p => !p)) throw new Error(`an app process did not start; see ${ctx.history.processes.map(p => p.log).join(', ')}`)
  for (const tenant of ctx.plan.variant.tenants ?? []) {
    const res = await driver.provision(ctx, tenant, true)
    if (res.status >= 300 || res.status <= 0) throw new Error(`subscribing ${tenant} failed: ${res.status} ${JSON.stringify(res.body ?? res.error)}`)
  }
}

/**
 * Samples the claims every second (I6): which process holds which row, and until when; and the relay's rows that
 * were charged an attempt, with their last error (what a broker outage must not cost).
 */
function sampleClaims(ctx) {
  let stopped = false
  const loop = (async () => {
    while (!stopped) {
      if (!ctx.outage) {
        try {
          const sample = { at: now(), claims: await state.claims(ctx.database) }
          if (ctx.redis) sample.charged = await state.charged(ctx.database, 'broker')
          ctx.history.claimSamples.push(sample)
        } catch {
          // the database is restarting, or a file is being replaced: the next sample
        }
      }
      await new Promise(resolve => setTimeout(resolve, SAMPLE_EVERY))
    }
  })()
  return async () => {
    stopped = true
    await loop
  }
}

async function faultPhase(ctx) {
  const start = (ctx.history.phase.start = now())
  for (const event of ctx.plan.events) {
    const wait = start + event.at - now()
    if (wait > 0) await new Promise(resolve => setTimeout(resolve, wait))
    const running = DISPATCH[event.kind](ctx, event).catch(e => ctx.history.note(`${event.kind} failed: ${e.stack}`))
    ctx.inFlight.add(running)
    running.finally(() => ctx.inFlight.delete(running))
  }
  const rest = start + ctx.plan.duration - now()
  if (rest > 0) await new Promise(resolve => setTimeout(resolve, rest))
}

/** Runs `seed`; resolves with its history and final state, and the folder with its logs. */
async function runSeed(seed, generator) {
  const plan = makePlan(seed, generator)
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `event-queues-chaos-${seed}-`))
  const history = new History(plan)
  const name = `chaos_${seed}_${randomBytes(3).toString('hex')}`
  const database = plan.variant.db === 'sqlite' ? sqliteDatabase(dir, plan.variant) : await postgresDatabase(name)
  const remoteLog = path.join(dir, 'remote.log')
  const ctx = {
    plan, history, database, remoteLog, runtime: random(seed, 'runtime'),
    slotLocks: new Map(), skews: new Map(), unsubscribed: new Set(), inFlight: new Set(), databaseUp: Promise.resolve()
  }
  ctx.configOf = () => configOf(ctx)
  ctx.fleet = new Fleet({ dir, env: { CHAOS_LOG: remoteLog }, configOf: ctx.configOf, grace: GRACE, history })
  if (plan.consumer) {
    // the consumer half: the seed's Redis, and the consumer app on a database of its own of the same kind
    ctx.redis = await redis.startRedis({ persistence: plan.consumer.persistence })
    ctx.consumerDb = plan.variant.db === 'sqlite' ? sqliteDatabase(dir, {}, 'consumer.sqlite') : await postgresDatabase(`${name}_c`)
    ctx.consumers = new Fleet({ app: 'consumer', dir, env: { CHAOS_LOG: remoteLog }, configOf: () => consumerSide.consumerConfig(ctx), grace: GRACE, history })
  }
  let stopSampling
  let timer
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => {
      ctx.fleet.killAll()
      ctx.consumers?.killAll()
      killClis()
      reject(new Error(`seed ${seed} did not settle within ${SEED_LIMIT / 60_000} min; its processes were killed (logs in ${dir})`))
    }, SEED_LIMIT)
  })
  // (Promise.race observes the work that loses too: its later failures are not unhandled rejections)
  const within = work => Promise.race([work, limit])
  try {
    await within(setup(ctx))
    stopSampling = sampleClaims(ctx)
    await within(faultPhase(ctx))
    const final = await within(settle(ctx))
    const result = { seed, plan, history, final, dir, remoteLog, maxAttempts: ctx.maxAttempts, redis: ctx.redis && { persistence: ctx.redis.persistence } }
    // kept with the logs of a failing seed: CHAOS_RECHECK=<folder> checks it again without running it
    fs.writeFileSync(path.join(dir, 'result.json'), JSON.stringify(result))
    return result
  } finally {
    clearTimeout(timer)
    ctx.stopping = true
    await stopSampling?.()
    ctx.fleet.killAll()
    ctx.consumers?.killAll()
    killClis()
    await redis.stopRedis(ctx.redis)
  }
}

module.exports = { runSeed }
