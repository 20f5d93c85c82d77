const fs = require('fs')
const os = require('os')
const path = require('path')
const { startApp } = require('../support/app')
const { useBrowser } = require('../support/browser')
const { waitFor } = require('../support/wait')
const { MESSAGES, millis } = require('../support/outbox')
const cds = require('@sap/cds')

/**
 * The ops page in a real headless Chromium against the running test app: what it shows is what the table holds,
 * its buttons revive and delete, and it is shown to operators only. Retries wait an hour (backoff base 1h), so the
 * pending message stays pending while the page is compared with the table; lag is sampled every 250 ms.
 */
const { OPERATOR_USERS: USERS } = require('../support/operators')
const app = startApp({
  requires: {
    auth: { kind: 'mocked', users: USERS },
    queue: { pollInterval: '1h', backoff: { base: '1h' } },
    'dead-letter-queue': { lagSampleInterval: '250ms' }
  },
  log: { levels: { odata: 'warn', error: 'silent' } }
})
const chromium = useBrowser()
const LIMITS = { queue: 10, slowQueue: 2 }
/** UPDATE_SCREENSHOTS=1 refreshes the README's screenshot; otherwise it goes to a temporary folder. */
const SCREENSHOT = process.env.UPDATE_SCREENSHOTS
  ? path.join(__dirname, '..', '..', 'docs', 'ops-page.png')
  : path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'ops-page-')), 'ops-page.png')

const row = ID => SELECT.one.from(MESSAGES).where({ ID })

async function enqueue(srv, event, data = {}) {
  const before = new Set((await SELECT.from(MESSAGES).columns('ID')).map(r => r.ID))
  await cds.tx(() => cds.queued(srv).emit(event, data))
  return (await SELECT.from(MESSAGES).columns('ID')).find(r => !before.has(r.ID)).ID
}

/** What the page should show, counted from the table itself by CAP's columns. */
async function countsInTable(now = Date.now()) {
  const counts = {}
  for (const r of await SELECT.from(MESSAGES).columns('target', 'attempts', 'status', 'timestamp')) {
    const q = (counts[r.target] ??= { pending: 0, processing: 0, dead: 0, relayLag: 0 })
    if (r.attempts >= (LIMITS[r.target] ?? 10)) q.dead++
    else if (r.status === 'processing') q.processing++
    else {
      q.pending++
      q.relayLag = Math.max(q.relayLag, Math.floor((now - millis(r.timestamp)) / 1000))
    }
  }
  return counts
}

/** The queues table as the page renders it. */
const queuesOnPage = page =>
  page.$$eval('#queues tbody tr', rows =>
    Object.fromEntries(rows.map(tr => {
      const cell = field => tr.querySelector(`[data-field="${field}"]`)
      return [tr.dataset.queue, {
        pending: Number(cell('pending').textContent),
        processing: Number(cell('processing').textContent),
        dead: Number(cell('dead').textContent),
        relayLag: Number(cell('relayLag').dataset.seconds)
      }]
    }))
  )
/**
 * Clicks a dead letter's button in one step inside the page: the page renders its rows anew on every refresh (5 s),
 * and puppeteer's click (find, scroll into view, click) could hold a row the next refresh had replaced on a loaded
 * machine ("Node is detached from document").
 */
const clickRowButton = (page, ID, action) => page.$eval(`#dead tr[data-id="${ID}"] button[data-action="${action}"]`, button => button.click())
const deadOnPage = page => page.$$eval('#dead tbody tr', rows => rows.map(tr => tr.dataset.id).sort())
/** Resolves once the page rendered data fetched after `since` (epoch ms). */
const renderedAfter = (page, since) => page.waitForFunction(t => Number(document.body.dataset.loaded) > t, { timeout: 10000 }, since)

describe('the ops page in headless Chromium', () => {
  let target, named, gate, open, page, url
  const calls = []
  const failing = new Set()
  const requested = []
  const ids = {}

  beforeAll(async () => {
    url = app.url.replace('localhost', '127.0.0.1')
    target = await cds.connect.to('Target')
    named = cds.unqueued(await cds.connect.to('NamedQueue'))
    target.on('explode', req => {
      calls.push(`explode ${req.data.n}`)
      throw Object.assign(new Error(`the remote system rejected booking ${req.data.n}`), { unrecoverable: true })
    })
    target.on('flaky', () => {
      throw new Error('the flights system is down')
    })
    named.on('ping', async req => {
      if (failing.has(req.data.n)) throw Object.assign(new Error(`ping ${req.data.n} failed: 503 Service Unavailable`), { unrecoverable: true })
      await gate
      calls.push(`ping ${req.data.n}`)
    })

    // dead: two on the default queue, one on slowQueue; pending: one waiting for its retry; processing: one held
    ids.exploded1 = await enqueue(target, 'explode', { n: 1 })
    ids.exploded2 = await enqueue(target, 'explode', { n: 2 })
    failing.add(3)
    ids.pinged = await enqueue(named, 'ping', { n: 3 })
    ids.flaky = await enqueue(target, 'flaky')
    gate = new Promise(resolve => (open = resolve))
    ids.held = await enqueue(named, 'ping', { n: 4 })
    await waitFor(async () => {
      const c = await countsInTable()
      return c.queue?.dead === 2 && c.queue?.pending === 1 && c.slowQueue?.dead === 1 && c.slowQueue?.processing === 1
    }, { what: 'the messages to reach their states' })
    await waitFor(async () => (await row(ids.flaky)).attempts === 1, { what: 'the failed attempt of flaky' })

    page = await chromium.browser.newPage()
    page.on('request', r => requested.push(r.url()))
    await page.authenticate({ username: 'ops', password: 'ops' })
  })
  afterAll(() => open?.())

  test('it loads with only its own files and the operator service, and shows the numbers the table holds', async () => {
    const res = await page.goto(`${url}/event-queues/`, { waitUntil: 'load' })
    expect(res.status()).toBe(200)
    await page.waitForSelector('body[data-loaded]')

    const table = await countsInTable()
    const shown = await queuesOnPage(page)
    expect(Object.keys(shown).sort()).toEqual(['queue', 'slowQueue'])
    for (const queue of ['queue', 'slowQueue']) {
      const { relayLag, ...counts } = shown[queue]
      const { relayLag: lagInTable, ...countsInTableNow } = table[queue]
      expect([queue, counts]).toEqual([queue, countsInTableNow])
      // the page's lag was computed a moment before the table was read
      expect(Math.abs(relayLag - lagInTable)).toBeLessThanOrEqual(2)
    }
    expect(await deadOnPage(page)).toEqual([ids.exploded1, ids.exploded2, ids.pinged].sort())
    expect(await page.$eval('#dead-count', e => e.textContent)).toBe('(3)')
    const error = await page.$eval(`#dead tr[data-id="${ids.pinged}"] td.error summary`, e => e.textContent)
    expect(error).toContain('ping 3 failed: 503 Service Unavailable')

    const origin = new URL(url).origin
    expect(requested.length).toBeGreaterThan(3)
    expect(requested.filter(u => new URL(u).origin !== origin)).toEqual([])
  })

  test('the chart draws the sampled relay lag of each queue, ending at the lag the table shows now', async () => {
    await new Promise(resolve => setTimeout(resolve, 1200)) // let the server take a few more samples
    const since = Date.now()
    await page.click('#refresh')
    await renderedAfter(page, since)
    const series = await page.$$eval('#lag-chart polyline', lines =>
      lines.map(l => ({ queue: l.dataset.queue, points: Number(l.dataset.points), lastLag: Number(l.dataset.lastLag), drawn: l.getAttribute('points').split(' ').length }))
    )
    const table = await countsInTable()
    expect(series.map(s => s.queue).sort()).toEqual(['queue', 'slowQueue'])
    for (const s of series) {
      expect(s.points).toBeGreaterThanOrEqual(4)
      expect(s.drawn).toBe(s.points)
      expect(Math.abs(s.lastLag - table[s.queue].relayLag)).toBeLessThanOrEqual(2)
    }
    await page.screenshot({ path: SCREENSHOT, fullPage: true })
    expect(fs.statSync(SCREENSHOT).size).toBeGreaterThan(10_000)
  })

  test("its reads leave nothing in the app's request log, where the app's own requests still show", async () => {
    cds.log('odata', 'info')
    const info = jest.spyOn(console, 'info') // what CAP's loggers finally write to
    try {
      for (let i = 0; i < 2; i++) {
        const since = Date.now()
        await page.click('#refresh')
        await renderedAfter(page, since)
      }
      await app.axios.get('/odata/v4/target/Records', { auth: { username: 'ops', password: 'ops' } })
      const lines = info.mock.calls.map(args => args.map(a => (typeof a === 'string' ? a : JSON.stringify(a))).join(' '))
      expect(lines.filter(line => line.includes('event-queues'))).toEqual([])
      expect(lines.filter(line => line.includes('/odata/v4/target/Records'))).toHaveLength(1)
    } finally {
      info.mockRestore()
      cds.log('odata', 'warn')
    }
  })

  test('clicking Revive runs the dead letter right away, and the page drops it', async () => {
    failing.delete(3)
    open() // the held message may finish too
    const before = calls.length
    await clickRowButton(page, ids.pinged, 'revive')
    await page.waitForFunction(ID => document.getElementById('status').textContent === `Revived ${ID}: it is processed right away.`, {}, ids.pinged)
    // pollInterval is 1h: the message ran because the revive woke the runner
    await waitFor(async () => !(await row(ids.pinged)), { what: 'the revived message to be processed and deleted' })
    expect(calls.slice(before)).toContain('ping 3')
    await page.waitForFunction(ID => !document.querySelector(`#dead tr[data-id="${ID}"]`), {}, ids.pinged)
    expect(await deadOnPage(page)).toEqual([ids.exploded1, ids.exploded2].sort())
  })

  test('clicking Delete asks first, then deletes the dead letter without running it', async () => {
    const dialogs = []
    page.once('dialog', dialog => {
      dialogs.push(dialog.message())
      return dialog.accept()
    })
    const before = calls.length
    await clickRowButton(page, ids.exploded1, 'delete')
    await page.waitForFunction(ID => document.getElementById('status').textContent === `Deleted ${ID}.`, {}, ids.exploded1)
    expect(dialogs).toEqual(['Delete this dead letter? It will not be processed.'])
    expect(await row(ids.exploded1)).toBeUndefined()
    expect(calls.slice(before)).toEqual([])
    await page.waitForFunction(ID => !document.querySelector(`#dead tr[data-id="${ID}"]`), {}, ids.exploded1)
    const shown = await queuesOnPage(page)
    expect(shown.queue.dead).toBe((await countsInTable()).queue.dead)
  })

  test('the queue filter narrows the dead letters; Delete all and Revive all act on the selection after asking', async () => {
    failing.add(5)
    const pinged = await enqueue(named, 'ping', { n: 5 })
    await waitFor(async () => (await row(pinged))?.dueAt === null, { what: 'a second dead letter on slowQueue' })
    await page.click('#refresh')
    await page.waitForFunction(ID => !!document.querySelector(`#dead tr[data-id="${ID}"]`), {}, pinged)

    let since = Date.now()
    await page.select('#dead-queue', 'queue')
    await renderedAfter(page, since)
    expect(await deadOnPage(page)).toEqual([ids.exploded2])

    const dialogs = []
    const accept = dialog => {
      dialogs.push(dialog.message())
      return dialog.accept()
    }
    page.on('dialog', accept)
    try {
      await page.click('#delete-all')
      await page.waitForFunction(() => document.getElementById('status').textContent === 'Deleted 1 dead letter of queue.')
      expect(await row(ids.exploded2)).toBeUndefined()
      expect(await row(pinged)).toBeDefined()

      failing.delete(5)
      since = Date.now()
      await page.select('#dead-queue', '')
      await renderedAfter(page, since)
      await page.click('#revive-all')
      await page.waitForFunction(() => document.getElementById('status').textContent === 'Revived 1 dead letter.')
      await waitFor(async () => !(await row(pinged)), { what: 'the revived message to be processed' })
      expect(calls).toContain('ping 5')
      expect(dialogs).toEqual(['Delete all dead letters of queue? They will not be processed.', 'Revive all dead letters? They are processed right away.'])
    } finally {
      page.off('dialog', accept)
    }
  })

  test('Pause asks first, then holds the queue in every instance, shown as paused by the operator; Resume runs its messages', async () => {
    const accept = dialog => dialog.accept()
    page.on('dialog', accept)
    // clicked inside the page: the table is rendered anew every few seconds, a node found before may be gone by the click
    const click = async action => {
      const selector = `#queues tr[data-queue="queue"] button[data-control="${action}"]`
      await page.waitForSelector(selector).catch(async e => {
        throw new Error(`${e.message}: the queues are ${await page.$eval('#queues tbody', t => t.innerHTML)}`)
      })
      await page.$eval(selector, button => button.click())
    }
    const state = () => page.$eval('#queues tr[data-queue="queue"] [data-field="state"]', e => e.textContent)
    const says = text => page.waitForFunction(t => document.getElementById('status').textContent === t, {}, text).catch(async e => {
      throw new Error(`${e.message}: the page says "${await page.$eval('#status', s => s.textContent)}"`)
    })
    try {
      await click('pause')
      await says('Paused queue: its messages wait until it is resumed.')
      expect(await state()).toMatch(/^Paused by ops since /)
      expect(await page.$eval('#queues tr[data-queue="queue"] [data-field="relayLag"]', e => e.textContent)).toMatch(/\(paused\)$/)
      target.on('tick', () => void calls.push('tick'))
      const waiting = await enqueue(target, 'tick')
      await cds.flush()
      expect(calls).not.toContain('tick')
      expect(await row(waiting)).toMatchObject({ attempts: 0, status: null })

      await click('resume')
      await says('Resumed queue: its messages run again.')
      await waitFor(async () => !(await row(waiting)), { what: 'the resumed queue to run its message' })
      expect(calls).toContain('tick')
      expect(await state()).toBe('Running')
    } finally {
      page.off('dialog', accept)
      }
    })

  test('opened with the credentials in its URL (http://ops:ops@host/event-queues/), it loads its data like any other way in', async () => {
    // A context of its own: no credentials given to the browser but those in the URL.
    const context = await chromium.browser.createBrowserContext()
    try {
      const tab = await context.newPage()
      const res = await tab.goto(`${url.replace('://', '://ops:ops@')}/event-queues/`, { waitUntil: 'load' })
      expect(res.status()).toBe(200)
      // loaded, or an error said on the page: whichever comes first
      await tab.waitForFunction(() => document.body.dataset.loaded || !document.getElementById('status').hidden, { timeout: 20000 })
      expect(await tab.$eval('#status', e => (e.hidden ? '' : e.textContent))).toBe('')
      expect(Object.keys(await queuesOnPage(tab)).sort()).toEqual(Object.keys(await queuesOnPage(page)).sort())
    } finally {
      await context.close()
    }
  })

  test("an inbox's dropped redeliveries show on its queue's row, as statistics() counts them", async () => {
    // `inbox` (test/app/package.json): local-messaging, inboxed: true; a broker hands the same event over twice
    const inbox = await cds.connect.to('inbox')
    inbox.on('orders/shipped', () => {})
    const id = cds.utils.uuid()
    for (let i = 0; i < 2; i++) await inbox.processInboundMsg({ user: cds.User.privileged }, { event: 'orders/shipped', data: {}, headers: { id } })
    await page.goto(`${url}/event-queues/`, { waitUntil: 'load' })
    await page.waitForSelector('body[data-loaded]')
    const counted = (await cds.connect.to('EventQueuesService').then(ops => ops.send('statistics'))).filter(r => r.queue === 'queue').reduce((sum, r) => sum + (r.duplicates ?? 0), 0)
    expect(counted).toBeGreaterThanOrEqual(1)
    const shown = await page.$eval('#queues tr[data-queue="queue"] [data-field="duplicates"]', td => Number(td.textContent))
    expect(shown).toBe(counted)
  })

  test('users without the operator role get 403 in the browser, anonymous requests a login (401), as from the operator service', async () => {
    // A context each: a browser context keeps the credentials it once sent.
    const asClerk = await chromium.browser.createBrowserContext()
    const asAnonymous = await chromium.browser.createBrowserContext()
    try {
      const clerk = await asClerk.newPage()
      await clerk.authenticate({ username: 'clerk', password: 'clerk' })
      const res = await clerk.goto(`${url}/event-queues/`)
      expect(res.status()).toBe(403)
      expect(await res.text()).not.toContain('page.js')
      // Without credentials the browser is asked to log in; a headless one has nobody to ask and gives up.
      const anonymous = await asAnonymous.newPage()
      await expect(anonymous.goto(`${url}/event-queues/`)).rejects.toThrow(/ERR_INVALID_AUTH_CREDENTIALS/)
    } finally {
      await asClerk.close()
      await asAnonymous.close()
    }
    for (const file of ['', 'page.js', 'page.css']) {
      const res = await app.axios.get(`/event-queues/${file}`, { validateStatus: () => true })
      expect([file, res.status, res.headers['www-authenticate']]).toEqual([file, 401, 'Basic realm="Users"'])
    }
  })
})
