const http = require('http')
const { newDatabaseFile, onPostgres } = require('../support/app')
const { startInstance, stopInstance, runOneOff } = require('../support/instances')
const { waitFor } = require('../support/wait')

/**
 * Rows whose queue this process was never told about: written by another instance through `cds.queued(srv, options)`,
 * or by an older CAP version under the service's name. Under `cds serve`, the app must keep serving and process them.
 */
describe('rows for queues this process does not know', () => {
  const hooks = []
  let remote, instance, database, baseUrl

  const requires = () => ({ Ext: { kind: 'rest', credentials: { url: `http://127.0.0.1:${remote.address().port}` } } })
  const records = async kind => {
    const response = await fetch(`${baseUrl}/odata/v4/target/Records?$filter=kind eq '${kind}'`)
    if (response.status !== 200) throw new Error(`GET Records answered ${response.status}`)
    return (await response.json()).value
  }

  beforeAll(async () => {
    remote = http.createServer((req, res) => {
      let body = ''
      req.on('data', chunk => (body += chunk))
      req.on('end', () => {
        hooks.push({ method: req.method, url: req.url, body: JSON.parse(body || 'null') })
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
      })
    })
    await new Promise(resolve => remote.listen(0, '127.0.0.1', resolve))
    if (onPostgres()) {
      const postgres = require('../support/postgres')
      database = postgres.newDatabaseName()
      await postgres.createDatabase(database)
    } else database = { kind: 'sqlite', credentials: { url: newDatabaseFile() } }
    instance = await startInstance(database, { name: 'A', deploy: true, requires: requires(), env: { CDS_LOG_LEVELS_QUEUE: 'warn' } })
    baseUrl = instance.output.match(/listening on (http:\/\/\S+)/)[1]
  }, 60000)

  afterAll(async () => {
    await stopInstance(instance)
    await new Promise(resolve => remote.close(resolve))
  })

  test('a message of a queue registered with cds.queued(srv, options) in another process runs with the default settings and a warning', async () => {
    await runOneOff(database, 'queue-ext', { requires: requires() })
    await waitFor(() => hooks.length > 0, { timeout: 20000, what: 'the queued POST /hooks at the remote service' })
    expect(hooks).toEqual([{ method: 'POST', url: '/hooks', body: { from: 'one-off' } }])
    expect(instance.exitCode).toBeNull()
    expect(await records('handled')).toEqual([])
    expect(instance.output).toMatch(/\bExt\b.*(unknown|not know)/i)
  }, 60000)

  test('a row of an older CAP version, whose target is the name of a local-messaging service, is processed', async () => {
    const row = {
      ID: '7d3f4c1e-0000-4000-8000-000000000001',
      timestamp: new Date().toISOString(),
      target: 'messaging',
      msg: JSON.stringify({ 'cds.internal.user': 'legacy', context: { id: 'c-1' }, event: 'legacyPing', data: { n: 42 } })
    }
    await runOneOff(database, 'insert', { env: { ROWS: JSON.stringify([row]) } })
    const received = await waitFor(async () => (await records('messaging')).length > 0 && records('messaging'), {
      timeout: 20000,
      what: 'the legacy row delivered to the messaging subscriber'
    })
    expect(received.map(r => r.message)).toEqual(['42'])
    expect(instance.exitCode).toBeNull()
  }, 60000)
})
