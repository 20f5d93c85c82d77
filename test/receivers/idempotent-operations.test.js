const { startApp } = require('../support/app')
const { waitFor } = require('../support/wait')
const cds = require('@sap/cds')

// Idempotent receivers for CAP actions (issue 23, item 3): operations marked @idempotent (test/app/srv/receiver.cds)
// answer a repeated Idempotency-Key with the recorded response, as the IETF draft "The Idempotency-Key HTTP Header
// Field" describes, over HTTP as any client calls them.
const app = startApp({ log: { levels: { odata: 'error', error: 'silent', remote: 'silent' } } })
app.axios.defaults.validateStatus = () => true

const RECEIVER = '/odata/v4/receiver'
const RECEIPTS = 'cds.outbox.Receipts'
const key = value => ({ 'Idempotency-Key': `"${value}"` })
const post = (path, body, headers = {}, user = 'alice') =>
  app.axios.post(RECEIVER + path, body, { headers, auth: { username: user, password: '' } })
const records = kind => SELECT.from('test.Records').where({ kind })

function gate() {
  let open
  const opened = new Promise(resolve => (open = resolve))
  return { opened, open }
}

describe('idempotent operations', () => {
  let srv
  const holding = { started: gate(), release: gate() }
  let failNext = 0
  beforeAll(async () => {
    srv = await cds.connect.to('Receiver')
    srv.on('book', async req => {
      const ID = cds.utils.uuid()
      await INSERT.into('test.Records').entries({ ID, kind: 'booking', message: req.data.flight })
      if (failNext > 0 && failNext--) throw Object.assign(new Error('flights system busy'), { status: 503 })
      return { ID, seats: req.data.seats }
    })
    srv.on('hold', async req => {
      holding.started.open()
      await holding.release.opened
      await INSERT.into('test.Records').entries({ ID: cds.utils.uuid(), kind: 'hold', message: req.data.flight })
      return `held ${req.data.flight}`
    })
    srv.on('unmarked', async req => {
      await INSERT.into('test.Records').entries({ ID: cds.utils.uuid(), kind: 'unmarked', message: req.data.flight })
      return 'ran'
    })
    srv.on('confirm', 'Bookings', async req => {
      const [{ ID }] = req.params
      await INSERT.into('test.Records').entries({ ID: cds.utils.uuid(), kind: 'confirmation', message: ID })
      return `confirmed ${req.data.note}`
    })
  })

  test('a request with an Idempotency-Key seen before gets the recorded response; the operation does not run again', async () => {
    const first = await post('/book', { flight: 'LH400', seats: 2 }, key('k-book'))
    expect(first.status).toBe(200)
    const again = await post('/book', { flight: 'LH400', seats: 2 }, key('k-book'))
    expect(again.status).toBe(200)
    expect(again.data).toEqual(first.data)
    expect(await records('booking')).toHaveLength(1)
  })

  test('the key and the response are recorded in the transaction of the operation: a failed attempt records nothing, its retry runs', async () => {
    failNext = 1
    const failed = await post('/book', { flight: 'LH454', seats: 1 }, key('k-retry'))
    expect(failed.status).toBe(503)
    expect(await SELECT.from(RECEIPTS).where({ ID: 'k-retry' })).toEqual([])
    const retried = await post('/book', { flight: 'LH454', seats: 1 }, key('k-retry'))
    expect(retried.status).toBe(200)
    // the failed attempt's booking rolled back with it: one booking
    expect((await records('booking')).filter(r => r.message === 'LH454')).toHaveLength(1)
    const receipt = await SELECT.one.from(RECEIPTS).where({ ID: 'k-retry' })
    expect(receipt).toMatchObject({ scope: 'action:Receiver.book', state: 'done' })
    expect(JSON.parse(receipt.response)).toMatchObject({ seats: 1 })
  })

  test('the same key with another payload is refused with 422, nothing runs', async () => {
    await post('/book', { flight: 'LH100', seats: 1 }, key('k-reused'))
    const reused = await post('/book', { flight: 'LH100', seats: 3 }, key('k-reused'))
    expect(reused.status).toBe(422)
    expect(reused.data.error.message).toMatch(/Idempotency-Key/)
    expect((await records('booking')).filter(r => r.message === 'LH100')).toHaveLength(1)
  })

  test('another user with the same key is refused with 422: a recorded response goes only to the user who made it', async () => {
    const mine = await post('/book', { flight: 'LH200', seats: 1 }, key('k-user'), 'alice')
    const theirs = await post('/book', { flight: 'LH200', seats: 1 }, key('k-user'), 'bob')
    expect(mine.status).toBe(200)
    expect(theirs.status).toBe(422)
  })

  test('a request with the same key while the first one runs is refused with 409; once it finished, the recorded response', async () => {
    const first = post('/hold', { flight: 'LH300' }, key('k-concurrent'))
    await holding.started.opened
    const concurrent = await post('/hold', { flight: 'LH300' }, key('k-concurrent'))
    expect(concurrent.status).toBe(409)
    holding.release.open()
    expect((await first).status).toBe(200)
    const later = await post('/hold', { flight: 'LH300' }, key('k-concurrent'))
    expect(later.status).toBe(200)
    expect(later.data.value).toBe('held LH300')
    expect(await records('hold')).toHaveLength(1)
  })

  test('without the header, and on operations not marked, every request runs', async () => {
    await post('/book', { flight: 'LH500', seats: 1 })
    await post('/book', { flight: 'LH500', seats: 1 })
    await post('/unmarked', { flight: 'LH500' }, key('k-unmarked'))
    await post('/unmarked', { flight: 'LH500' }, key('k-unmarked'))
    expect((await records('booking')).filter(r => r.message === 'LH500')).toHaveLength(2)
    expect(await records('unmarked')).toHaveLength(2)
  })

  test('an entity marked @idempotent: a repeated POST creates one row and answers with it again', async () => {
    const first = await post('/Bookings', { kind: 'created', message: 'once' }, key('k-create'))
    expect(first.status).toBe(201)
    const again = await post('/Bookings', { kind: 'created', message: 'once' }, key('k-create'))
    expect(again.status).toBe(201)
    expect(again.data.ID).toBe(first.data.ID)
    expect(await records('created')).toHaveLength(1)
  })

  test('a bound action marked @idempotent', async () => {
    const { data: booking } = await post('/Bookings', { kind: 'to-confirm', message: 'bound' })
    const path = `/Bookings(${booking.ID})/Receiver.confirm`
    const first = await post(path, { note: 'n1' }, key('k-bound'))
    const again = await post(path, { note: 'n1' }, key('k-bound'))
    expect([first.status, again.status]).toEqual([200, 200])
    expect(again.data.value).toBe('confirmed n1')
    expect(await records('confirmation')).toHaveLength(1)
  })

  test('a key that is empty or longer than 255 characters is refused with 400', async () => {
    expect((await post('/book', { flight: 'LH600', seats: 1 }, key(''))).status).toBe(400)
    const long = await post('/book', { flight: 'LH600', seats: 1 }, key('k'.repeat(256)))
    expect(long.status).toBe(400)
    expect(long.data.error.message).toMatch(/Idempotency-Key/)
    expect((await records('booking')).filter(r => r.message === 'LH600')).toHaveLength(0)
  })

  test('a key is recorded per operation: the same key on another operation is another request', async () => {
    await post('/book', { flight: 'LH700', seats: 1 }, key('k-shared'))
    const { data: booking } = await post('/Bookings', { kind: 'shared', message: 'x' })
    const other = await post(`/Bookings(${booking.ID})/Receiver.confirm`, { note: 'shared' }, key('k-shared'))
    expect(other.status).toBe(200)
    await waitFor(async () => (await SELECT.from(RECEIPTS).where({ ID: 'k-shared' })).length === 2, { what: 'two receipts' })
  })
})
