const { execFile } = require('child_process')
const path = require('path')
const { startApp, APP } = require('../support/app')
const cds = require('@sap/cds')

/**
 * The lines of a start's stderr that are not Node's own process warnings: on Node 22, @cap-js/sqlite 3 loads
 * node:sqlite, and Node prints an ExperimentalWarning of two lines before anything of the app's.
 */
const ownLines = stderr => stderr.trim().split('\n').filter(line => !/^\(node:\d+\) |^\(Use `node --trace-warnings/.test(line))

startApp()

// A boot exits by itself; the kill is a safeguard against a hung child only. On a loaded machine (load 30 on two
// cores) a boot took longer than the 30 s this was once, and the killed child (code null) failed tests that start.
const BOOT_SAFEGUARD = 150000
jest.setTimeout(BOOT_SAFEGUARD + 30000)

/** Boots the test app in a new process with `requires` merged in (and `env`); resolves to its exit code and output. */
function boot(requires, env = {}) {
  const config = { requires: { db: { kind: 'sqlite', credentials: { url: ':memory:' } }, ...requires } }
  return new Promise(resolve => {
    execFile(process.execPath, [path.join(__dirname, '..', 'support', 'boot-child.js')], {
      cwd: APP, env: { ...process.env, CDS_CONFIG: JSON.stringify(config), ...env }, timeout: BOOT_SAFEGUARD
    }, (error, stdout, stderr) => resolve({ code: error ? error.code : 0, stdout, stderr: error?.killed ? `killed after ${BOOT_SAFEGUARD} ms\n${stderr}` : stderr }))
  })
}

/** `cds serve` as a user runs it (@sap/cds-dk's CLI) with `requires` merged in: for starts that fail, so it exits. */
function serve(requires) {
  const config = { requires: { db: { kind: 'sqlite', credentials: { url: ':memory:' } }, ...requires } }
  const cli = require.resolve('@sap/cds-dk/bin/cds.js')
  return new Promise(resolve => {
    execFile(process.execPath, [cli, 'serve', '--port', '0'], {
      cwd: APP, env: { ...process.env, CDS_CONFIG: JSON.stringify(config) }, timeout: BOOT_SAFEGUARD
    }, (error, stdout, stderr) => resolve({ code: error ? error.code : 0, stderr }))
  })
}

/** The test app silences the queue's log; these boots show its warnings. */
const WARNINGS = { CDS_LOG_LEVELS_QUEUE: 'warn' }

describe('configuration validation', () => {
  test.each([
    [{ queue: { maxAttempts: 'ten' } }, 'Invalid cds.requires.queue.maxAttempts: "ten". Expected an integer >= 1.'],
    [{ queue: { timeout: '-5m' } }, 'Invalid cds.requires.queue.timeout: "-5m"'],
    [{ queue: { pollInterval: 'soon' } }, 'Invalid cds.requires.queue.pollInterval: "soon"'],
    [{ queue: { backoff: { jitter: 2 } } }, 'Invalid cds.requires.queue.backoff.jitter: 2. Expected a number from 0 to 1.'],
    [{ queue: { concurrency: 0 } }, 'Invalid cds.requires.queue.concurrency: 0. Expected an integer from 1 to 1000.'],
    [{ queue: { maxClaimBytes: 100 } }, 'Invalid cds.requires.queue.maxClaimBytes: 100. Expected an integer >= 1024.'],
    [{ queue: { store: 'fast' } }, "Invalid cds.requires.queue.store: \"fast\". Expected 'auto', 'native' or 'portable'."],
    [{ Outboxed: { impl: 'srv/plain-service.js', outboxed: 42 } }, 'Invalid cds.requires.Outboxed.outboxed: 42. Expected true, false, a queue name, or an object of queue options.'],
    [{ OwnQueue: { impl: 'srv/plain-service.js', outboxed: { maxAttempts: -1 } } }, 'Invalid cds.requires.OwnQueue.outboxed.maxAttempts: -1'],
    [{ queue: { secretHeaders: ['x-acme token'] } }, `Invalid cds.requires.queue.secretHeaders: ["x-acme token"]. Expected a list of header names, '*' matching any characters`],
    [{ slowQueue: { keepHeaders: ['Authorization'] } }, 'Invalid cds.requires.slowQueue.keepHeaders: ["Authorization"]. Expected a list of header names, other than authorization, proxy-authorization, cookie'],
    [{ slowQueue: { rateLimit: 100 } }, "Invalid cds.requires.slowQueue.rateLimit: 100. Expected an object { count, per } like { count: 100, per: '1m' }, or false."],
    [{ queue: { rateLimit: { count: 0, per: '1s' } } }, 'Invalid cds.requires.queue.rateLimit.count: 0. Expected an integer >= 1.'],
    [{ queue: { circuitBreaker: { failures: 5 } } }, 'Invalid cds.requires.queue.circuitBreaker: {"failures":5}. Expected an object { failures, probeInterval }'],
    [{ OwnQueue: { impl: 'srv/plain-service.js', outboxed: { circuitBreaker: { failures: 5, probeInterval: 'often' } } } }, 'Invalid cds.requires.OwnQueue.outboxed.circuitBreaker.probeInterval: "often"'],
    [{ queue: { deadLetterRetention: '500ms' } }, `Invalid cds.requires.queue.deadLetterRetention: "500ms". Expected a duration of at least 1 s such as '30d', or false to keep dead letters.`],
    [{ OwnQueue: { impl: 'srv/plain-service.js', outboxed: { deadLetterRetention: true } } }, `Invalid cds.requires.OwnQueue.outboxed.deadLetterRetention: true. Expected a duration of at least 1 s such as '30d', or false to keep dead letters.`],
    [{ queue: { deadLetterRetention: 'a month' } }, `Invalid cds.requires.queue.deadLetterRetention: "a month". Expected a duration of at least 1 s`],
    [{ queue: { deliver: 'thrice' } }, `Invalid cds.requires.queue.deliver: "thrice". Expected 'once', or 'twice' in tests (every message delivered a second time).`]
  ])('%j fails the start with an error naming option, value and what is allowed', async (requires, message) => {
    const { code, stderr } = await boot(requires)
    expect(code).not.toBe(0)
    expect(stderr).toContain(message)
  })

  test('a configuration error is one line, as CAP prints its own start errors, and the exit code is 1', async () => {
    const { code, stderr } = await serve({ queue: { maxAttempts: 'ten' } })
    expect(code).toBe(1)
    expect(ownLines(stderr)).toEqual(['[queue] - Invalid cds.requires.queue.maxAttempts: "ten". Expected an integer >= 1.'])
  })

  test('an invalid @idempotent annotation is one line too', async () => {
    // a model of the app's that cds.requires names, as a reuse package's is
    const { code, stderr } = await serve({ annotated: { model: '../support/models/bad-idempotent' } })
    expect(code).toBe(1)
    expect(ownLines(stderr)).toEqual(['[queue] - Invalid @idempotent of action BadlyAnnotated.book: "yes". Expected true.'])
  })

  test('a misspelt option gets a warning that names it and the closest known option; the app starts', async () => {
    const { code, stderr } = await boot({ queue: { maxAttemps: 3 }, OwnQueue: { impl: 'srv/plain-service.js', outboxed: { timeuot: '1m' } } }, WARNINGS)
    expect(code).toBe(0)
    expect(stderr).toContain("Unknown option cds.requires.queue.maxAttemps: ignored. Did you mean 'maxAttempts'?")
    expect(stderr).toContain("Unknown option cds.requires.OwnQueue.outboxed.timeuot: ignored. Did you mean 'timeout'?")
  })

  test("a service's setting on an entry that names no service (a misspelt name) gets a warning with the closest service", async () => {
    const { code, stderr } = await boot({ Outboxd: { outboxed: true }, Mailer: { inboxed: true, idempotencyKey: true } }, WARNINGS)
    expect(code).toBe(0)
    expect(stderr).toContain("cds.requires.Outboxd.outboxed has no effect: no service 'Outboxd' is defined in the model, served or configured (kind, impl). Did you mean 'Outboxed'?")
    expect(stderr).toContain("cds.requires.Mailer.inboxed, .idempotencyKey has no effect: no service 'Mailer' is defined")
  })

  test('inboxed on a service that is no messaging service, idempotencyKey on one without remote calls, get a warning when it connects', async () => {
    const { code, stderr } = await boot({ Plain: { impl: 'srv/plain-service.js', inboxed: true, idempotencyKey: true } }, { ...WARNINGS, PRINT_QUEUE_OF: 'Plain' })
    expect(code).toBe(0)
    expect(stderr).toContain('cds.requires.Plain.inboxed has no effect: Plain is no messaging service, and an inbox keeps what a messaging service receives')
    expect(stderr).toContain('cds.requires.Plain.idempotencyKey has no effect: Plain makes no remote calls, and the key goes with the requests of remote services (kind odata, rest)')
  })

  test('the list of known options in that warning names each option once', async () => {
    const { code, stderr } = await boot({ slowQueue: { maxAttemps: 3 } }, WARNINGS)
    expect(code).toBe(0)
    const known = stderr.match(/Unknown option cds\.requires\.slowQueue\.maxAttemps: .* Known options: ([^.]+)\./)[1].split(', ')
    expect(known).toContain('storeLastError')
    expect(known).toEqual([...new Set(known)])
  })

  test('outboxed on the database service gets a warning at start, as cds.queued(db) fails: a database cannot be queued', async () => {
    const { code, stderr } = await boot({ db: { kind: 'sqlite', credentials: { url: ':memory:' }, outboxed: true } }, WARNINGS)
    expect(code).toBe(0)
    expect(stderr).toContain("cds.requires.db.outboxed has no effect: 'db' is a database service, which cannot be queued; queue the service that uses it.")
  })

  test("an outboxed queue name without a cds.requires entry of that name gets a warning listing the known queues", async () => {
    const { code, stderr } = await boot({ Outboxed: { impl: 'srv/plain-service.js', outboxed: 'yes' } }, WARNINGS)
    expect(code).toBe(0)
    expect(stderr).toContain(
      "cds.requires.Outboxed.outboxed names the queue 'yes', which has no cds.requires.yes: its messages go to a queue 'yes' " +
        "with the options of cds.requires.queue. Known queues: queue (the default, outboxed: true), slowQueue."
    )
  })

  test('a runner-wide option on a queue of its own gets a warning saying where it belongs', async () => {
    const { code, stderr } = await boot({ OwnQueue: { impl: 'srv/plain-service.js', outboxed: { pollInterval: '1s' } } }, WARNINGS)
    expect(code).toBe(0)
    expect(stderr).toContain('Option cds.requires.OwnQueue.outboxed.pollInterval has no effect here: it applies to the runner as a whole; set it in cds.requires.queue.')
  })

  test('options set by environment variables as operators set them on BTP (they arrive in lower case) are honoured', async () => {
    const { code, stdout } = await boot({}, {
      CDS_REQUIRES_QUEUE_MAXATTEMPTS: '3', CDS_REQUIRES_QUEUE_BACKOFF_BASE: '2s', PRINT_QUEUE_OF: 'Outboxed',
      CDS_REQUIRES_QUEUE_CIRCUITBREAKER_FAILURES: '4', CDS_REQUIRES_QUEUE_CIRCUITBREAKER_PROBEINTERVAL: '10s'
    })
    expect(code).toBe(0)
    const settings = JSON.parse(stdout.trim().split('\n').pop())
    expect(settings).toMatchObject({ name: 'queue', maxAttempts: 3, backoff: { base: 2000 }, circuitBreaker: { failures: 4, probeInterval: 10000 } })
  })

  test("the duplicate-delivery test mode (deliver: 'twice') fails the start in the production profile, saying where it belongs", async () => {
    // mocked users: in production CAP's default authentication needs @sap/xssec, which the test app does not have
    const { code, stderr } = await boot({ queue: { deliver: 'twice' }, auth: { kind: 'mocked' } }, { NODE_ENV: 'production' })
    expect(code).not.toBe(0)
    expect(stderr).toContain(`Invalid cds.requires.queue.deliver: "twice". Expected 'once' in the production profile ('twice' is a test mode: set it in the [test] profile only).`)
  })

  test('a valid configuration starts', async () => {
    const { code, stderr } = await boot({ queue: { maxAttempts: 5, timeout: '10m', backoff: { base: '2s', factor: 2 } } })
    expect(stderr).not.toMatch(/Invalid|Error/)
    expect(code).toBe(0)
  })

  test('cds.queued of a database service, of a plain object, or with options that are no object fails clearly', async () => {
    expect(() => cds.queued(cds.db)).toThrow("cds.queued(srv): 'db' is a database service, which cannot be queued")
    expect(() => cds.queued({})).toThrow('Invalid argument of cds.queued(srv): {}. Expected a CAP service')
    expect(() => cds.queued(undefined)).toThrow('Invalid argument of cds.queued(srv): undefined')
    const srv = await cds.connect.to('Plain')
    expect(() => cds.queued(srv, 'fast')).toThrow('Invalid options of cds.queued(srv, options): "fast". Expected an object of queue options.')
  })

  test('cds.queued.health with a bad option fails clearly, naming option, value and what is allowed', async () => {
    await expect(cds.queued.health({ maxLag: 'soon' })).rejects.toThrow('Invalid maxLag of cds.queued.health(options): "soon". Expected a number of milliseconds >= 0, or a string like')
    await expect(cds.queued.health({ timeout: 0 })).rejects.toThrow('Invalid timeout of cds.queued.health(options): 0. Expected a duration of at least 1 ms.')
    await expect(cds.queued.health({ maxlag: '5m' })).rejects.toThrow(`Invalid option of cds.queued.health(options): "maxlag". Expected 'maxLag' or 'timeout'.`)
    await expect(cds.queued.health('5m')).rejects.toThrow(`Invalid options of cds.queued.health(options): "5m". Expected an object like { maxLag: '5m' }.`)
  })
})
