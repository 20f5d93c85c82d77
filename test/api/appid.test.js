const { startApp } = require('../support/app')
const { MESSAGES } = require('../support/outbox')
const cds = require('@sap/cds')

// CAP's `appid` lets several apps share one table: this app writes, claims and shows only rows of its own.
startApp({ appid: 'my-app' })

/** CAP 10's task ID for service Target and task tick with appid my-app, from its own `deterministic_uuid`. */
const CAP10_TASK_ID = 'ea52de13-4110-44cc-87b4-cf8b6e1a56dc'

describe('appid', () => {
  let srv
  beforeAll(async () => {
    srv = await cds.connect.to('Target')
  })
  afterEach(() => DELETE.from(MESSAGES))

  test('a task row has CAP 10\'s deterministic ID from service, task name and appid, and carries the appid', async () => {
    await srv.schedule('tick').after('1h')
    expect(await SELECT.one.from(MESSAGES).where({ task: 'tick' })).toMatchObject({ ID: CAP10_TASK_ID, appid: 'my-app' })
    expect(await srv.unschedule('tick')).toBe(1)
  })

  test('queued messages carry the appid and are processed; rows of another app are left alone', async () => {
    const handled = []
    srv.on('mine', req => handled.push(req.data.n))
    await INSERT.into(MESSAGES).entries({
      ID: cds.utils.uuid(), timestamp: new Date().toISOString(), target: 'queue', appid: 'other-app',
      msg: JSON.stringify({ service: 'Target', event: 'mine', data: { n: 'other' } })
    })
    const written = await cds.tx(async () => {
      await cds.queued(srv).emit('mine', { n: 1 })
      return SELECT.one.from(MESSAGES).where({ msg: { like: '%"n":1%' } })
    })
    expect(written.appid).toBe('my-app')
    await cds.flush()
    expect(handled).toEqual([1])
    expect((await SELECT.from(MESSAGES)).map(r => r.appid)).toEqual(['other-app'])
  })

  test("a row from before appid (appid null, target '<appid><service>', no service in msg) is processed for that service, as CAP 10 does", async () => {
    const handled = []
    srv.on('old', req => handled.push(req.data.n))
    const old = { ID: cds.utils.uuid(), timestamp: new Date().toISOString(), target: 'my-appTarget', msg: JSON.stringify({ event: 'old', data: { n: 1 } }) }
    const foreign = { ID: cds.utils.uuid(), timestamp: new Date().toISOString(), target: 'queue', msg: JSON.stringify({ service: 'Target', event: 'old', data: { n: 2 } }) }
    await INSERT.into(MESSAGES).entries([old, foreign])
    await cds.flush()
    expect(handled).toEqual([1])
    // a row without appid whose target is not this app's: CAP 10 leaves it to the app it belongs to, and so does the plugin
    expect((await SELECT.from(MESSAGES)).map(r => r.ID)).toEqual([foreign.ID])
  })
})
