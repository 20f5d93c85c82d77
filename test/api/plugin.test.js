const { execFileSync } = require('child_process')
const path = require('path')
const fs = require('fs')
const { startApp, APP } = require('../support/app')
const { waitFor } = require('../support/wait')
const { MESSAGES } = require('../support/outbox')
const cds = require('@sap/cds')

startApp()

describe('the plugin package', () => {
  test('cds.plugins finds it through the app\'s file: dependency, like any CAP plugin', () => {
    const plugin = cds.env.plugins['cds-event-queues']
    expect(plugin).toBeDefined()
    // resolved through test/app/node_modules/cds-event-queues, the link npm made for "file:../.."
    const link = path.join(APP, 'node_modules', 'cds-event-queues')
    expect(fs.lstatSync(link).isSymbolicLink()).toBe(true)
    expect(plugin.impl).toBe(path.join(fs.realpathSync(link), 'cds-plugin.js'))
  })

  test('importing its modules reads no cds.env, so a test may require them before cds.test() sets the app\'s root', () => {
    // cds.env is a getter that caches its result on first read: read too early, it is the environment of the
    // test's working directory, without the app's plugins and database.
    const script = `
      const cds = require('@sap/cds')
      // ./test.js is cds-event-queues/test, which a project's tests require before cds.test()
      for (const m of ['./lib/plugin', './lib/runner/runner', './lib/api/install', './test.js']) require(m)
      process.stdout.write(String(Object.getOwnPropertyNames(cds).includes('env')))`
    expect(execFileSync(process.execPath, ['-e', script], { cwd: path.join(__dirname, '..', '..'), encoding: 'utf8' })).toBe('false')
  })

  test('the published package holds the compiled JavaScript, the CDS models, the README and its guides (docs/), no TypeScript sources', () => {
    const [pack] = JSON.parse(execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
      cwd: path.join(__dirname, '..', '..'), encoding: 'utf8'
    }))
    const files = pack.files.map(f => f.path)
    for (const f of ['cds-plugin.js', 'lib/runner/runner.js', 'lib/api/queued.js', 'db/outbox.cds', 'srv/event-queues.cds', 'srv/event-queues.js', 'README.md', 'docs/CONFIGURATION.md', 'package.json', 'index.d.ts', 'test.js', 'test.d.ts', 'lib/testing/messages.js']) {
      expect(files).toContain(f)
    }
    expect(files.filter(f => f.endsWith('.ts') && !f.endsWith('.d.ts'))).toEqual([])
    expect(files.filter(f => f.startsWith('test/') || f.startsWith('examples/'))).toEqual([])
  })

  test('cds.queued, cds.outboxed, cds.unqueued, cds.unboxed and cds.flush are the plugin\'s, not CAP\'s built-in queue', () => {
    const builtIn = require('@sap/cds/libx/queue/api.js')
    expect(cds.queued).not.toBe(builtIn.queued)
    expect(cds.outboxed).toBe(cds.queued)
    expect(cds.unqueued).not.toBe(builtIn.unqueued)
    expect(cds.unboxed).toBe(cds.unqueued)
    expect(cds.flush).not.toBe(builtIn.cdsFlush)
  })

  test('200 queued messages: every handler is invoked exactly once, and only the plugin\'s runner claims them', async () => {
    const srv = await cds.connect.to('Target')
    const counts = new Map()
    const claimers = new Set()
    srv.on('count', async req => {
      counts.set(req.data.n, (counts.get(req.data.n) ?? 0) + 1)
      const row = await SELECT.one.from(MESSAGES, req.queue.messageId).columns('claimedBy')
      claimers.add(row?.claimedBy)
    })
    const queued = cds.queued(srv)
    for (let batch = 0; batch < 10; batch++) {
      await cds.tx(async () => {
        for (let i = 0; i < 20; i++) await queued.emit('count', { n: batch * 20 + i })
      })
    }
    await waitFor(() => counts.size === 200, { timeout: 60000, what: '200 handler runs' })
    // every row is gone with its handler's commit: no message is left that could run a second time
    await waitFor(async () => (await SELECT.from(MESSAGES)).length === 0, { what: 'an empty queue' })
    expect([...counts.values()].every(c => c === 1)).toBe(true)
    // Claimed by this process's runner: by a claim pass, or already at enqueue (`…:enqueued`) while it had free slots.
    for (const claimer of claimers) expect(claimer).toMatch(new RegExp(`:${process.pid}:[0-9a-f]{6}(:enqueued)?$`))
  }, 120000)
})
