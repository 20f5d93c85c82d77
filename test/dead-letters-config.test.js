const { startApp } = require('./support/app')

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

  test('roles that are not role names fail with an error naming the option', () => {
    const { compileSettings } = require('../lib/settings')
    for (const bad of [42, [], [''], { role: 'x' }]) {
      expect(() => compileSettings({ requires: { 'dead-letter-queue': { roles: bad } } })).toThrow(
        /Invalid cds\.requires\.dead-letter-queue\.roles: .*Expected a role name/
      )
    }
  })
})
