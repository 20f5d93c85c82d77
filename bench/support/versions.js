const { startServer, stopServer } = require('./postgres')
const { newDatabase } = require('./databases')
const { environment } = require('./app')
const { runOnce } = require('./processes')

/**
 * What the small benches (held.js, enqueue-claimed.js) compare: this plugin, and the version BENCH_BASELINE names
 * (a built copy inside this repository, see bench/run.js) where it is set.
 */
const VERSIONS = ['plugin', ...(process.env.BENCH_BASELINE ? ['baseline'] : [])]

/** Runs `fn(server)` with the PostgreSQL server of the run where `dbs` names PostgreSQL; stops it after. */
async function withServer(dbs, fn) {
  const server = dbs.includes('postgres') ? await startServer() : undefined
  try {
    return await fn(server)
  } finally {
    if (server) await stopServer(server)
  }
}

/**
 * `script` as a child process once per repetition and version, each on a new database of `kind` (`env` added to its
 * environment), the versions' order alternating per repetition; `seen(version, rep, result)` as each one ends.
 * Resolves to each version's results, in the order of the repetitions.
 */
async function perVersion({ script, kind, server, reps, env, seen }) {
  const results = new Map(VERSIONS.map(version => [version, []]))
  for (let rep = 0; rep < reps; rep++) {
    for (const version of rep % 2 ? [...VERSIONS].reverse() : VERSIONS) {
      const { db, cleanup } = await newDatabase(kind, server)
      try {
        const result = await runOnce(script, environment(version, db, env))
        seen(version, rep, result)
        results.get(version).push(result)
      } finally {
        await cleanup()
      }
    }
  }
  return results
}

module.exports = { withServer, perVersion }
