const fs = require('fs')
const os = require('os')
const path = require('path')

/**
 * A real headless Chromium for one suite: Debian's `chromium` (or CHROMIUM_PATH), driven by puppeteer-core over the
 * DevTools protocol, with a fresh profile and everything that would call out of the machine switched off. Closed
 * in afterAll, killed by its PID if it does not close, its profile removed.
 */
const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium'
const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync'
]

function useBrowser() {
  const state = { browser: undefined, profile: undefined }
  beforeAll(async () => {
    if (!fs.existsSync(CHROMIUM)) {
      throw new Error(`No Chromium at ${CHROMIUM}: install Debian's package (apt-get install -y chromium) or set CHROMIUM_PATH`)
    }
    const puppeteer = require('puppeteer-core')
    state.profile = fs.mkdtempSync(path.join(os.tmpdir(), 'event-queues-chromium-'))
    state.browser = await puppeteer.launch({
      executablePath: CHROMIUM,
      // Exactly these flags: puppeteer's defaults would add others.
      ignoreDefaultArgs: true,
      args: [...FLAGS, `--user-data-dir=${state.profile}`, 'about:blank'],
      defaultViewport: { width: 1280, height: 900 }
    })
  })
  afterAll(async () => {
    const pid = state.browser?.process()?.pid
    let timer
    const timeout = new Promise((_, reject) => (timer = setTimeout(() => reject(new Error('close timed out')), 10000)))
    try {
      await Promise.race([state.browser?.close(), timeout])
    } catch {
      if (pid) {
        try {
          process.kill(pid, 'SIGKILL')
        } catch {
          // already gone
        }
      }
    } finally {
      clearTimeout(timer)
    }
    if (state.profile) fs.rmSync(state.profile, { recursive: true, force: true })
  })
  return state
}

module.exports = { useBrowser, CHROMIUM }
