const { startApp } = require('../support/app')
const cds = require('@sap/cds')

/**
 * An app's own jest suite written as cap-js/attachments writes its unit tests: every test's `beforeEach` stubs the
 * `cds.context` getter (it returns `{ model }`, so the code under test finds the model after an await) and replaces
 * `cds.connect.to` with a mock; neither is restored. The first stub comes right after cds.test started the server,
 * while the ops page's first lag sample runs: there it came between the sample's reads by timing. Here the sample's
 * first read waits for the stub, so it comes there every time.
 */
let stubbed
const stubbing = new Promise(resolve => (stubbed = resolve))
cds.on('served', () => {
  let held = false
  cds.db.before('READ', req => {
    if (held || req.target?.name !== 'cds.outbox.Messages') return
    held = true
    return stubbing
  })
})
startApp()

beforeEach(() => {
  jest.spyOn(cds, 'context', 'get').mockReturnValue({ model: cds.model })
  cds.connect.to = jest.fn().mockResolvedValue({ emit: jest.fn().mockResolvedValue(undefined) })
  stubbed()
})

describe("an app's tests that stub cds.context and cds.connect.to in beforeEach", () => {
  test('a first test that touches no database', async () => {
    const service = await cds.connect.to('Attachments')
    await service.emit('scanned', {})
    expect(service.emit).toHaveBeenCalledWith('scanned', {})
  })

  test("a later test writes and reads the app's database", async () => {
    const ID = cds.utils.uuid()
    await INSERT.into('test.Records').entries({ ID, kind: 'stubbed', message: 'written' })
    expect(await SELECT.one.from('test.Records').columns('message').where({ ID })).toEqual({ message: 'written' })
  })

  test('and the one after it', async () => {
    expect(await SELECT.from('test.Records').where({ kind: 'stubbed' })).toHaveLength(1)
  })
})
