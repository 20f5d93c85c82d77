const { startApp } = require('../support/app')

const USERS = {
  ops: { password: 'ops', roles: ['internal-user'] },
  admin: { password: 'admin', roles: ['queue-admin'] }
}
const app = startApp({
  requires: { auth: { kind: 'mocked', users: USERS }, 'dead-letter-queue': { roles: 'queue-admin' } },
  log: { levels: { odata: 'warn', error: 'error' } }
})

const get = (user, url) =>
  app.axios.get(`/odata/v4/event-queues${url}`, { auth: { username: user, password: USERS[user].password }, validateStatus: () => true })

describe('dead letter service configuration', () => {
  test('cds.requires.dead-letter-queue.roles replaces internal-user as the required role', async () => {
    expect((await get('admin', '/DeadOutboxMessages')).status).toBe(200)
    expect((await get('admin', '/statistics()')).status).toBe(200)
    expect((await get('ops', '/DeadOutboxMessages')).status).toBe(403)
  })

  test('the ops page requires the same configured roles', async () => {
    const page = user => app.axios.get('/event-queues/', { auth: { username: user, password: USERS[user].password }, validateStatus: () => true })
    expect((await page('admin')).status).toBe(200)
    expect((await page('ops')).status).toBe(403)
  })

  test('lagSampleInterval must be a duration of at least 100 ms', () => {
    const { compileSettings } = require('../../lib/settings')
    expect(compileSettings({ requires: { 'dead-letter-queue': { lagSampleInterval: '1m' } } }).lagSampleInterval).toBe(60_000)
    expect(compileSettings({ requires: {} }).lagSampleInterval).toBe(30_000)
    expect(() => compileSettings({ requires: { 'dead-letter-queue': { lagSampleInterval: 'often' } } })).toThrow(
      'Invalid cds.requires.dead-letter-queue.lagSampleInterval: "often". Expected a number of milliseconds >= 0, or a string like'
    )
    expect(() => compileSettings({ requires: { 'dead-letter-queue': { lagSampleInterval: 10 } } })).toThrow(
      "Invalid cds.requires.dead-letter-queue.lagSampleInterval: 10. Expected a duration of at least 100 ms, e.g. '30s'."
    )
  })

  test('roles that are not role names fail with an error naming the option', () => {
    const { compileSettings } = require('../../lib/settings')
    for (const bad of [42, [], [''], { role: 'x' }]) {
      expect(() => compileSettings({ requires: { 'dead-letter-queue': { roles: bad } } })).toThrow(
        /Invalid cds\.requires\.dead-letter-queue\.roles: .*Expected a role name/
      )
    }
  })
})
