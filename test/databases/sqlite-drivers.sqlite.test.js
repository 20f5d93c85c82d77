const { execFile } = require('child_process')
const path = require('path')
const { APP } = require('../support/app')
const cds = require('@sap/cds')

/**
 * The drivers of @cap-js/sqlite: better-sqlite3 and node:sqlite have the native store; sql.js (a WebAssembly build,
 * in memory only) runs the portable one; asking for the native store there fails the start, naming the option.
 */

/** Runs test/support/driver-child.js on `db` (+ `queue` options): its exit code, last line of output as JSON, stderr. */
function run(db, queue = {}) {
  const config = { requires: { db, queue } }
  return new Promise(resolve => {
    execFile(process.execPath, [path.join(__dirname, '..', 'support', 'driver-child.js')], {
      cwd: APP, env: { ...process.env, CDS_CONFIG: JSON.stringify(config) }, timeout: 30000
    }, (error, stdout, stderr) => {
      const last = stdout.trim().split('\n').pop()
      resolve({ code: error ? error.code : 0, result: error ? undefined : JSON.parse(last), stderr })
    })
  })
}

/** Whether @cap-js/sqlite could load the driver here: node:sqlite needs Node 22; better-sqlite3 a build for this Node. */
const available = name => {
  try {
    if (name === 'node:sqlite') {
      require('node:sqlite')
      return true
    }
    const Database = require(require.resolve(name, { paths: [require.resolve('@cap-js/sqlite')] }))
    new Database(':memory:').close()
    return true
  } catch {
    return false
  }
}
const memory = { url: ':memory:' }
const processed = { seen: [{ n: 1 }], left: 0, clockInRoundTrip: true }

describe('SQLite drivers', () => {
  test("sql.js runs the portable store: a queued message is processed and its row deleted, the database's clock read to the millisecond", async () => {
    const { code, result, stderr } = await run({ kind: 'sqlite', driver: 'sql.js', credentials: memory })
    expect([code, stderr.match(/Error.*/)?.[0]]).toEqual([0, undefined])
    expect(result).toEqual({ store: 'PortableStore', ...processed })
  })

  test("sql.js with store: 'native' fails the start with an error naming the option, the database and what is allowed", async () => {
    const { code, stderr } = await run({ kind: 'sqlite', driver: 'sql.js', credentials: memory }, { store: 'native' })
    // the start's configuration error ends the process as CAP's start errors do (lib/start-failure.ts)
    expect(code).toBe(1)
    expect(stderr).toContain(`Invalid cds.requires.queue.store: "native". The database (kind 'sqlite' with driver 'sql.js') has no native store`)
    expect(stderr).toContain("Expected 'auto' or 'portable' here.")
  })

  ;(available('node:sqlite') ? test : test.skip)('node:sqlite runs the native store', async () => {
    const { code, result } = await run({ kind: 'sqlite', driver: 'node', credentials: memory })
    expect(code).toBe(0)
    expect(result).toEqual({ store: 'NativeStore', ...processed })
  })

  ;(available('better-sqlite3') ? test : test.skip)('better-sqlite3 runs the native store', async () => {
    const { code, result } = await run({ kind: 'sqlite', driver: 'better-sqlite3', credentials: memory })
    expect(code).toBe(0)
    expect(result).toEqual({ store: 'NativeStore', ...processed })
  })

  // cds 10.1's preset: kind 'sqlite' with an in-memory database, on @cap-js/sqlite's default driver
  ;(cds.env.requires.kinds['sqlite:memory'] ? test : test.skip)("the preset 'sqlite:memory' runs the native store", async () => {
    const { code, result } = await run('sqlite:memory')
    expect(code).toBe(0)
    expect(result).toEqual({ store: 'NativeStore', ...processed })
  })
})
