/**
 * `npm run test:chaos`: the invariant checker of issues 22 and 31. Runs the seeds of seeds.json (CI; CHAOS_LIST=open
 * the seeds that fail on main today, CHAOS_LIST=all every seed that ever failed), each with the generator it was
 * found with, or one seed (`CHAOS_SEED=<n>`), or random seeds for `CHAOS_MINUTES`, both with the latest generator
 * unless CHAOS_GENERATOR names another; each seed prints first, then what it did and every violation with the
 * processes' logs. Ends with `N passed, N failed` and a non-zero exit code on any violation.
 */
const fs = require('fs')
const path = require('path')
const { History } = require('./history')
const { randomInt } = require('crypto')
const { runSeed } = require('./seed')
const { check } = require('./invariants')
const { printSeed, figures } = require('./report')
const { stopPostgres } = require('./database')
const { killEverything } = require('./processes')
const { killRedisServers } = require('./redis')
const { LATEST } = require('./plan')
const { now } = require('./app/srv/true-clock')

/** Seeds of seeds.json without a `generator` were found with issue 22's (plan.js). */
const FIRST_GENERATOR = 22

/** The seeds to run, each with the generator its plan belongs to: `{ seed, generator }`. */
function seeds() {
  const generator = process.env.CHAOS_GENERATOR ? Number(process.env.CHAOS_GENERATOR) : LATEST
  if (process.env.CHAOS_SEED) return { list: process.env.CHAOS_SEED.split(',').map(seed => ({ seed: Number(seed), generator })) }
  if (process.env.CHAOS_MINUTES) return { until: now() + Number(process.env.CHAOS_MINUTES) * 60_000, generator }
  const { ci, more, open } = require('./seeds.json')
  // CHAOS_LIST=open: the seeds that fail on main today (see seeds.json); all: every seed that ever failed, beyond CI's budget
  const lists = { open, all: [...ci, ...open, ...more] }
  return { list: (lists[process.env.CHAOS_LIST] ?? ci).map(s => ({ seed: s.seed, generator: s.generator ?? FIRST_GENERATOR })) }
}

function* order({ list, until, generator }) {
  if (list) yield* list
  else while (now() < until) yield { seed: randomInt(1, 2 ** 31), generator }
}

/** Checks a kept seed's history again (after a change to the checker), without running it. */
function recheck(dir) {
  const result = JSON.parse(fs.readFileSync(path.join(dir, 'result.json'), 'utf8'))
  Object.setPrototypeOf(result.history, History.prototype)
  const violations = check(result)
  printSeed(result, violations)
  console.log(`${violations.length ? 0 : 1} passed, ${violations.length ? 1 : 0} failed`)
  process.exitCode = violations.length ? 1 : 0
}

async function main() {
  if (process.env.CHAOS_RECHECK) return recheck(process.env.CHAOS_RECHECK)
  const started = now()
  const totals = { passed: 0, failed: 0, messages: 0, faults: 0, violations: 0, failing: [] }
  for (const { seed, generator } of order(seeds())) {
    console.log(`seed ${seed} (generator ${generator})`)
    const t0 = now()
    let violations
    try {
      const result = await runSeed(seed, generator)
      violations = check(result)
      printSeed(result, violations)
      const fig = figures(result)
      totals.messages += fig.messages
      totals.faults += Object.values(fig.faults).reduce((a, b) => a + b, 0) - fig.faults['of them CLI']
      if (!violations.length && !process.env.CHAOS_KEEP) fs.rmSync(result.dir, { recursive: true, force: true })
    } catch (e) {
      violations = [e]
      console.log(`  ✗ seed ${seed}: the checker could not run it: ${e.stack}`)
    }
    totals.violations += violations.length
    if (violations.length) totals.failing.push(seed)
    totals[violations.length ? 'failed' : 'passed']++
    console.log(`  seed ${seed} ${violations.length ? 'FAILED' : 'passed'} in ${((now() - t0) / 1000).toFixed(0)} s`)
  }
  await stopPostgres()
  const minutes = ((now() - started) / 60_000).toFixed(1)
  console.log(`chaos: ${totals.passed + totals.failed} seeds in ${minutes} min, ${totals.messages} messages, ${totals.faults} faults and operator actions, ${totals.violations} violations${totals.failing.length ? `; failing seeds: ${totals.failing.join(', ')}` : ''}`)
  console.log(`${totals.passed} passed, ${totals.failed} failed`)
  process.exitCode = totals.failed ? 1 : 0
}

// Interrupted: every app process of the checker is killed by its PID, and the PostgreSQL server stopped.
process.once('SIGINT', () => {
  killEverything()
  killRedisServers()
  stopPostgres().finally(() => process.exit(130))
})

main()
