const path = require('path')
const { fork } = require('child_process')
const { now } = require('./app/srv/true-clock')

/**
 * How the checker talks to the app: HTTP as its clients and operators do (mocked users, Basic auth), and the CLI
 * `npx cds-event-queues` run in the app's folder on the app's configuration. Neither ever throws: a request cut off
 * by a fault is an answer too (`status: 0`), and the history needs it.
 */

const APP = path.join(__dirname, 'app')
const CLI = path.join(__dirname, '..', '..', 'bin', 'cds-event-queues.js')
/**
 * A request that takes longer than this is given up and counted as cut off (its outcome is read from the database).
 * Long: the server may still be working on it, and settling must not begin before it is done.
 */
const REQUEST_TIMEOUT = 300_000

const basic = user => `Basic ${Buffer.from(`${user}:`).toString('base64')}`

/** `{ status, body, error?, sentAt, doneAt }`; status 0 when no answer came (connection refused or cut). */
async function request(url, method, user, body, headers = {}) {
  const sentAt = now()
  try {
    const res = await fetch(url, {
      method,
      headers: { Authorization: basic(user), ...(body ? { 'Content-Type': 'application/json' } : {}), ...headers },
      body: body && JSON.stringify(body),
      signal: AbortSignal.timeout(REQUEST_TIMEOUT)
    })
    const text = await res.text()
    let parsed = text
    try {
      parsed = text ? JSON.parse(text) : undefined
    } catch {
      // not JSON: keep the text
    }
    return { status: res.status, body: parsed, sentAt, doneAt: now() }
  } catch (e) {
    return { status: 0, error: e.cause?.code ?? e.name ?? String(e), sentAt, doneAt: now() }
  }
}

/** CLI processes still running: killed by their PID when a seed is given up. */
const running = new Set()

function killClis() {
  for (const child of running) process.kill(child.pid, 'SIGKILL')
}

/** Runs the CLI with `args` beside the app; resolves to `{ code, output, sentAt, doneAt }`. */
function cli(args, config) {
  const sentAt = now()
  const child = fork(CLI, args, { cwd: APP, env: { ...process.env, CDS_CONFIG: JSON.stringify(config) }, silent: true })
  running.add(child)
  child.once('exit', () => running.delete(child))
  let output = ''
  child.stdout.on('data', chunk => (output += chunk))
  child.stderr.on('data', chunk => (output += chunk))
  return new Promise(resolve => child.once('exit', code => resolve({ code, output, sentAt, doneAt: now() })))
}

module.exports = { request, cli, killClis }
