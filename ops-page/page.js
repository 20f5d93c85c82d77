// @ts-check
/**
 * The ops page: what the operator service says, refreshed every few seconds, and its actions on buttons. Every
 * request goes to the operator service with the browser's own credentials (cookie, basic login, or the approuter's
 * token), so the page can neither see nor do more than its user may over OData. No libraries: it must load where
 * no CDN can be reached.
 */

/**
 * Relative to the page, so it also works behind an approuter route that prefixes every path; resolved without the
 * page address's credentials part: a page opened as http://user:@host/… may not fetch a URL that includes one.
 */
const API = (() => {
  const url = new URL('../odata/v4/event-queues/', location.href)
  url.username = url.password = ''
  return url.href
})()
const ACTIONS = 'EventQueuesService'
const REFRESH_MS = 5000
const HOUR_MS = 60 * 60 * 1000
const PALETTE = ['#0a6ed1', '#e9730c', '#107e3e', '#925ace', '#bb0000', '#0f828f', '#c0399f', '#6c7f93']

/**
 * @typedef {{ queue: string, service: string | null, event: string | null, pending: number, processing: number,
 *   dead: number, oldestPendingSince: string | null, relayLag: number, paused: boolean, pausedBy: string | null,
 *   pausedAt: string | null, breaker: 'closed' | 'open' | 'probing' | null, breakerUntil: string | null,
 *   brokerWaitingSince: string | null, duplicates: number }} Statistics
 * @typedef {{ at: string, queue: string, pending: number, processing: number, dead: number, relayLag: number }} LagSample
 * @typedef {{ ID: string, target: string, service: string | null, event: string | null, attempts: number,
 *   timestamp: string, lastAttemptTimestamp: string | null, lastError: string | null }} DeadLetter
 * @typedef {{ queue: string, pending: number, processing: number, dead: number, relayLag: number,
 *   oldestPendingSince: string | null, paused: boolean, pausedBy: string | null, pausedAt: string | null,
 *   breaker: 'closed' | 'open' | 'probing' | null, breakerUntil: string | null, waiting: BrokerWait[],
 *   duplicates: number }} QueueRow
 * @typedef {{ service: string, since: string, events: number }} BrokerWait
 */

/** @param {string} id */
function element(id) {
  const found = document.getElementById(id)
  if (!found) throw new Error(`the page has no element #${id}`)
  return found
}

/**
 * @param {string} tag
 * @param {Record<string, string>} [attributes]
 * @param {(Node | string)[]} [children]
 */
function create(tag, attributes = {}, children = []) {
  const node = document.createElement(tag)
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value)
  node.append(...children)
  return node
}

/** @param {string} tag @param {Record<string, string | number>} attributes */
function svg(tag, attributes) {
  const node = document.createElementNS('http://www.w3.org/2000/svg', tag)
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value))
  return node
}

/** @param {number} seconds */
function duration(seconds) {
  if (seconds < 60) return `${seconds}s`
  const minutes = Math.floor(seconds / 60)
  if (minutes < 60) return seconds % 60 ? `${minutes}m ${seconds % 60}s` : `${minutes}m`
  return minutes % 60 ? `${Math.floor(minutes / 60)}h ${minutes % 60}m` : `${minutes / 60}h`
}

/** @param {string | null} iso */
function time(iso) {
  return iso ? new Date(iso).toLocaleString() : '—'
}

/** @param {Date} date */
function clock(date) {
  return date.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })
}

class HttpError extends Error {
  /** @param {number} status @param {string} message */
  constructor(status, message) {
    super(message)
    this.status = status
  }
}

/** @param {Response} res */
async function failure(res) {
  if (res.status === 401) return new HttpError(401, 'Not logged in: reload the page to log in.')
  if (res.status === 403) return new HttpError(403, 'Your user lacks the operator role this page requires.')
  const body = await res.json().catch(() => undefined)
  return new HttpError(res.status, body?.error?.message ?? `${res.status} ${res.statusText}`)
}

/**
 * An approuter in front of the app checks a CSRF token on every change; CAP itself does not. Fetched once, and
 * again when a change is refused for it.
 * @type {string | undefined}
 */
let csrfToken

async function fetchCsrfToken() {
  const res = await fetch(API, { method: 'HEAD', headers: { 'x-csrf-token': 'fetch' }, credentials: 'same-origin' })
  csrfToken = res.headers.get('x-csrf-token') ?? undefined
}

/** @param {string} path */
async function read(path) {
  // the header keeps these periodic reads out of the app's request log (lib/ops/page.ts)
  const headers = { accept: 'application/json', 'x-event-queues-page': 'read' }
  const res = await fetch(API + path, { headers, credentials: 'same-origin' })
  if (!res.ok) throw await failure(res)
  return res.json()
}

/** @param {string} path @param {object} body */
async function post(path, body = {}, retried = false) {
  if (csrfToken === undefined) await fetchCsrfToken()
  /** @type {Record<string, string>} */
  const headers = { 'content-type': 'application/json', accept: 'application/json' }
  if (csrfToken) headers['x-csrf-token'] = csrfToken
  const res = await fetch(API + path, { method: 'POST', headers, body: JSON.stringify(body), credentials: 'same-origin' })
  if (res.status === 403 && res.headers.get('x-csrf-token')?.toLowerCase() === 'required' && !retried) {
    csrfToken = undefined
    return post(path, body, true)
  }
  if (!res.ok) throw await failure(res)
  return res.status === 204 ? undefined : res.json()
}

/** @param {string} text @param {boolean} [failed] */
function say(text, failed = false) {
  const status = element('status')
  status.textContent = text
  status.className = failed ? 'failed' : ''
  status.hidden = false
}

/** Statistics come per queue, service and event; the page shows queues: counts add up, the lag is the largest. */
/** @param {Statistics[]} rows @returns {QueueRow[]} */
function perQueue(rows) {
  /** @type {Map<string, QueueRow>} */
  const queues = new Map()
  for (const r of rows) {
    // the controls are the queue's: the same on each of its rows
    const { paused, pausedBy, pausedAt, breaker, breakerUntil } = r
    const q = queues.get(r.queue) ?? { queue: r.queue, pending: 0, processing: 0, dead: 0, relayLag: 0, oldestPendingSince: null, paused, pausedBy, pausedAt, breaker, breakerUntil, waiting: [], duplicates: 0 }
    if (r.brokerWaitingSince && r.service) waitsFor(q, r.service, r.brokerWaitingSince, r.pending)
    q.pending += r.pending
    q.processing += r.processing
    q.dead += r.dead
    // the redeliveries an inbox dropped, on its service's row
    q.duplicates += r.duplicates ?? 0
    q.relayLag = Math.max(q.relayLag, r.relayLag)
    if (r.oldestPendingSince && (!q.oldestPendingSince || r.oldestPendingSince < q.oldestPendingSince)) {
      q.oldestPendingSince = r.oldestPendingSince
    }
    queues.set(r.queue, q)
  }
  return [...queues.values()].sort((a, b) => a.queue.localeCompare(b.queue))
}

/**
 * Adds `events` of `service` waiting for their broker since `since` to the queue's waits (one per service).
 * @param {QueueRow} q @param {string} service @param {string} since @param {number} events
 */
function waitsFor(q, service, since, events) {
  const wait = q.waiting.find(w => w.service === service)
  if (!wait) return void q.waiting.push({ service, since, events })
  wait.events += events
  if (since < wait.since) wait.since = since
}

/** @param {QueueRow[]} queues */
function renderQueues(queues) {
  const body = /** @type {HTMLTableSectionElement} */ (element('queues').querySelector('tbody'))
  body.replaceChildren(
    ...queues.map(q => {
      const cell = (/** @type {keyof QueueRow | 'state'} */ field, /** @type {string} */ text, className = 'number') =>
        create('td', { class: className, 'data-field': field }, [text])
      const dead = cell('dead', String(q.dead), q.dead > 0 ? 'number alert' : 'number')
      // a paused queue lags on purpose: its lag says so instead of warning
      const lag = q.paused
        ? cell('relayLag', `${duration(q.relayLag)} (paused)`, 'number paused')
        : cell('relayLag', duration(q.relayLag), q.relayLag >= 60 ? 'number late' : 'number')
      lag.dataset.seconds = String(q.relayLag)
      const broken = q.breaker === 'open' || q.breaker === 'probing'
      const state = cell('state', stateOf(q), q.paused ? 'paused' : broken || q.waiting.length ? 'held' : '')
      state.dataset.paused = String(q.paused)
      state.dataset.breaker = q.breaker ?? ''
      // Resume for a queue its breaker holds back too: resuming closes the breaker
      const held = q.paused || broken
      const toggle = create('button', { type: 'button', class: held ? '' : 'danger', 'data-control': held ? 'resume' : 'pause', 'data-queue': q.queue }, [held ? 'Resume' : 'Pause'])
      return create('tr', { 'data-queue': q.queue }, [
        create('th', { scope: 'row' }, [q.queue]),
        cell('pending', String(q.pending)),
        cell('processing', String(q.processing)),
        dead,
        lag,
        cell('duplicates', String(q.duplicates)),
        cell('oldestPendingSince', time(q.oldestPendingSince), ''),
        state,
        create('td', { class: 'actions' }, [toggle])
      ])
    })
  )
  element('queues-empty').hidden = queues.length > 0
}

/**
 * What holds a queue back: an operator's pause (who, since when), or its circuit breaker (open until its next probe,
 * or probing), or the broker its messaging services' events wait for (since when, how many); nothing for a queue that
 * runs freely.
 * @param {QueueRow} q
 */
function stateOf(q) {
  if (q.paused) return `Paused by ${q.pausedBy ?? 'an operator'} since ${time(q.pausedAt)}`
  if (q.breaker === 'open') return `Circuit breaker open until ${time(q.breakerUntil)}`
  if (q.breaker === 'probing') return 'Circuit breaker probing'
  if (q.waiting.length) return q.waiting.map(w => `${w.service}: waiting for the broker since ${time(w.since)}, ${w.events} events`).join('; ')
  return 'Running'
}

/** The queues' colours stay put while the page is open, whatever order the data comes in. */
/** @type {Map<string, string>} */
const colours = new Map()
/** @param {string} queue */
function colourOf(queue) {
  if (!colours.has(queue)) colours.set(queue, PALETTE[colours.size % PALETTE.length])
  return /** @type {string} */ (colours.get(queue))
}

/** Lag axis ends: round durations, so the ticks read 0, 15s, 30s or 0, 5m, 10m. */
const AXIS_TOPS = [10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800, 86400]

/** @param {number} max */
function axisTop(max) {
  return AXIS_TOPS.find(top => top >= max) ?? Math.ceil(max / 86400) * 86400
}

/** Tick spacing for a time span: about six ticks, at round minutes or seconds. */
const TICKS_MS = [10_000, 30_000, 60_000, 120_000, 300_000, 600_000]

/**
 * The chart spans the last hour, or, while the server has sampled for less (it just started), the time since its
 * first sample: the lines use the whole width either way and the axis says which.
 * @param {LagSample[]} samples @param {number} now
 */
function renderChart(samples, now) {
  const chart = element('lag-chart')
  const width = 720, height = 220, left = 48, right = 12, top = 10, bottom = 24
  const first = samples.length ? Date.parse(samples[0].at) : now - HOUR_MS
  const from = Math.min(now - 60_000, Math.max(now - HOUR_MS, first))
  const span = now - from
  const byQueue = new Map()
  for (const s of samples) {
    if (!byQueue.has(s.queue)) byQueue.set(s.queue, [])
    byQueue.get(s.queue).push(s)
  }
  const max = axisTop(Math.max(0, ...samples.map(s => s.relayLag)))
  const x = (/** @type {number} */ t) => left + ((t - from) / span) * (width - left - right)
  const y = (/** @type {number} */ lag) => top + (1 - lag / max) * (height - top - bottom)

  const described = [...byQueue].map(([queue, points]) => `${queue}: ${duration(points[points.length - 1].relayLag)} now`)
  const label = samples.length
    ? `Relay lag per queue since ${clock(new Date(from))}, up to ${duration(Math.max(...samples.map(s => s.relayLag)))}; ${described.join(', ')}`
    : 'No relay lag samples yet'
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': label })
  for (const lag of [0, max / 2, max]) {
    root.append(svg('line', { class: 'axis', x1: left, x2: width - right, y1: y(lag), y2: y(lag) }))
    const tick = svg('text', { x: left - 6, y: y(lag) + 4, 'text-anchor': 'end' })
    tick.textContent = duration(Math.round(lag))
    root.append(tick)
  }
  const step = TICKS_MS.find(ms => span / ms <= 6) ?? 600_000
  const seconds = step < 60_000
  for (let t = Math.ceil(from / step) * step; t < now - step * 0.7; t += step) {
    const tick = svg('text', { x: x(t), y: height - 6, 'text-anchor': 'middle' })
    tick.textContent = seconds ? new Date(t).toLocaleTimeString() : clock(new Date(t))
    root.append(tick)
  }
  const nowTick = svg('text', { x: width - right, y: height - 6, 'text-anchor': 'end' })
  nowTick.textContent = 'now'
  root.append(nowTick)
  for (const [queue, points] of byQueue) {
    const series = svg('polyline', {
      class: 'series',
      stroke: colourOf(queue),
      'data-queue': queue,
      'data-points': points.length,
      'data-last-lag': points[points.length - 1].relayLag,
      points: points.map((/** @type {LagSample} */ p) => `${x(Date.parse(p.at)).toFixed(1)},${y(p.relayLag).toFixed(1)}`).join(' ')
    })
    root.append(series)
  }
  const legend = create('div', { class: 'legend' }, [...byQueue.keys()].map(queue => {
    const entry = create('span', {}, [queue])
    entry.style.setProperty('--swatch', colourOf(queue))
    return entry
  }))
  const since = first > now - HOUR_MS ? create('p', { class: 'hint' }, [`Lag samples since ${time(new Date(first).toISOString())}.`]) : ''
  chart.replaceChildren(root, legend, since)
}

/** @param {DeadLetter} d */
function deadRow(d) {
  const error = d.lastError ?? ''
  const firstLine = error.split('\n')[0]
  const errorCell = create('td', { class: 'error' }, error
    ? [create('details', {}, [create('summary', { title: firstLine }, [firstLine]), create('pre', {}, [error])])]
    : ['—'])
  const revive = create('button', { type: 'button', 'data-action': 'revive', 'data-id': d.ID }, ['Revive'])
  const remove = create('button', { type: 'button', class: 'danger', 'data-action': 'delete', 'data-id': d.ID }, ['Delete'])
  return create('tr', { 'data-id': d.ID }, [
    create('td', {}, [d.target]),
    create('td', {}, [d.service ?? '—']),
    create('td', {}, [d.event ?? '—']),
    create('td', { class: 'number' }, [String(d.attempts)]),
    create('td', {}, [time(d.timestamp)]),
    create('td', {}, [time(d.lastAttemptTimestamp)]),
    errorCell,
    create('td', { class: 'actions' }, [revive, remove])
  ])
}

/** @param {DeadLetter[]} dead @param {number} total */
function renderDeadLetters(dead, total) {
  const body = /** @type {HTMLTableSectionElement} */ (element('dead').querySelector('tbody'))
  body.replaceChildren(...dead.map(deadRow))
  element('dead-count').textContent = total > dead.length ? `(${dead.length} of ${total})` : `(${total})`
  element('dead-empty').hidden = dead.length > 0
  for (const id of ['revive-all', 'delete-all']) /** @type {HTMLButtonElement} */ (element(id)).disabled = total === 0
}

/** @param {QueueRow[]} queues */
function renderQueueFilter(queues) {
  const select = /** @type {HTMLSelectElement} */ (element('dead-queue'))
  const wanted = new Set([select.value, ...queues.filter(q => q.dead > 0).map(q => q.queue)].filter(Boolean))
  const present = new Set([...select.options].map(o => o.value).filter(Boolean))
  if ([...wanted].every(q => present.has(q)) && present.size === wanted.size) return
  const chosen = select.value
  select.replaceChildren(create('option', { value: '' }, ['all queues']), ...[...wanted].sort().map(q => create('option', { value: q }, [q])))
  select.value = chosen
}

function selectedQueue() {
  return /** @type {HTMLSelectElement} */ (element('dead-queue')).value
}

/** @param {string} value */
const literal = value => `'${value.replace(/'/g, "''")}'`

/** @type {Promise<void> | undefined} */
let loading
/** @type {Promise<void> | undefined} */
let queued

/**
 * Reads and renders everything. One read at a time; asked while one runs, it reads once more after it (the running
 * one may have read before the change that asks, e.g. an operator's pause), so what it returns is never older.
 * @returns {Promise<void>}
 */
function refresh() {
  if (!loading) return (loading = load().finally(() => (loading = undefined)))
  return (queued ??= loading.then(() => {
    queued = undefined
    return refresh()
  }))
}

async function load() {
  try {
    const queue = selectedQueue()
    const filter = queue ? `&$filter=target eq ${encodeURIComponent(literal(queue))}` : ''
    const columns = 'ID,target,service,event,attempts,timestamp,lastAttemptTimestamp,lastError'
    const [statistics, history, dead] = await Promise.all([
      read('statistics()'),
      read('lagHistory()'),
      read(`DeadOutboxMessages?$select=${columns}&$orderby=lastAttemptTimestamp desc&$top=200&$count=true${filter}`)
    ])
    const queues = perQueue(statistics.value)
    renderQueues(queues)
    renderChart(history.value, Date.now())
    renderQueueFilter(queues)
    renderDeadLetters(dead.value, dead['@odata.count'])
    element('updated').textContent = `Updated ${new Date().toLocaleTimeString()}`
    document.body.dataset.loaded = String(Date.now())
  } catch (e) {
    say(e instanceof Error ? e.message : String(e), true)
  }
}

/** @param {() => Promise<string>} action */
async function act(action) {
  const buttons = /** @type {NodeListOf<HTMLButtonElement>} */ (document.querySelectorAll('button'))
  buttons.forEach(b => (b.disabled = true))
  let text = ''
  let failed = false
  try {
    text = await action()
  } catch (e) {
    text = e instanceof Error ? e.message : String(e)
    failed = true
  }
  buttons.forEach(b => (b.disabled = false))
  // what the action says is shown with the tables as they are after it, not beside the ones from before
  await refresh()
  say(text, failed)
}

/** @param {'revive' | 'delete'} action @param {string} ID */
async function onOne(action, ID) {
  if (action === 'delete' && !confirm('Delete this dead letter? It will not be processed.')) return
  await act(async () => {
    await post(`DeadOutboxMessages(${ID})/${ACTIONS}.${action}`)
    return action === 'revive' ? `Revived ${ID}: it is processed right away.` : `Deleted ${ID}.`
  })
}

/**
 * Pause or resume a queue, in every instance of the app. Resuming also closes its circuit breaker: the button says
 * Resume for a queue its breaker holds back too.
 * @param {'pause' | 'resume'} action @param {string} queue
 */
async function onControl(action, queue) {
  if (action === 'pause' && !confirm(`Pause ${queue}? Its messages stay in the table until it is resumed.`)) return
  await act(async () => {
    await post(action, { queue })
    return action === 'pause' ? `Paused ${queue}: its messages wait until it is resumed.` : `Resumed ${queue}: its messages run again.`
  })
}

/** @param {'reviveAll' | 'deleteAll'} action */
async function onAll(action) {
  const queue = selectedQueue()
  const which = queue ? `all dead letters of ${queue}` : 'all dead letters'
  // The table shows at most 200; these act on every dead letter of the selection, so they always ask.
  const ask = action === 'deleteAll' ? `Delete ${which}? They will not be processed.` : `Revive ${which}? They are processed right away.`
  if (!confirm(ask)) return
  await act(async () => {
    const result = await post(action, queue ? { queue } : {})
    const count = typeof result?.value === 'number' ? result.value : 0
    return `${action === 'reviveAll' ? 'Revived' : 'Deleted'} ${count} dead letter${count === 1 ? '' : 's'}${queue ? ` of ${queue}` : ''}.`
  })
}

element('dead').addEventListener('click', event => {
  const button = /** @type {HTMLElement} */ (event.target).closest('button[data-action]')
  if (!(button instanceof HTMLButtonElement)) return
  const action = button.dataset.action === 'delete' ? 'delete' : 'revive'
  void onOne(action, button.dataset.id ?? '')
})
element('queues').addEventListener('click', event => {
  const button = /** @type {HTMLElement} */ (event.target).closest('button[data-control]')
  if (!(button instanceof HTMLButtonElement)) return
  void onControl(button.dataset.control === 'resume' ? 'resume' : 'pause', button.dataset.queue ?? '')
})
element('revive-all').addEventListener('click', () => void onAll('reviveAll'))
element('delete-all').addEventListener('click', () => void onAll('deleteAll'))
element('refresh').addEventListener('click', () => void refresh())
element('dead-queue').addEventListener('change', () => void refresh())

void refresh()
setInterval(() => void refresh(), REFRESH_MS)
