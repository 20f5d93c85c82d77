import cds from '@sap/cds'
import { readFileSync } from 'fs'
import { join } from 'path'
import type { Application, NextFunction, Request, RequestHandler, Response } from 'express'
import { routeMiddlewares } from '../cap/middlewares'
import { leaveOutOfRequestLog } from '../cap/request-log'
import { LOG } from '../log'

/**
 * The ops page: three static files served at `/event-queues/` to the operator roles only. The page itself holds no
 * data; it calls the operator service with the user's own credentials, so what it shows and does is exactly what
 * that user may see and do over OData.
 */

export const PAGE_PATH = '/event-queues'
const FOLDER = join(__dirname, '..', '..', 'ops-page')

/** Everything the page loads comes from here: no CDN, so it works behind a proxy and offline. */
const FILES: Record<string, string> = {
  '/': 'index.html',
  '/index.html': 'index.html',
  '/page.js': 'page.js',
  '/page.css': 'page.css'
}
const TYPES: Record<string, string> = {
  html: 'text/html; charset=utf-8',
  js: 'text/javascript; charset=utf-8',
  css: 'text/css; charset=utf-8'
}
// Only the page's own files and the operator service: no inline script, no other origin, not framed elsewhere.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'self'; base-uri 'none'; form-action 'none'"

/** Rejects with 401 (CAP's login challenge) or 403 unless the user has one of `roles`, as the operator service does. */
function requireOperator(roles: string[]): RequestHandler {
  return (_req: Request, _res: Response, next: NextFunction) => {
    const user = cds.context?.user
    if (user && roles.some(role => user.is(role))) return next()
    if (!user || !user.is('authenticated-user')) return next(401)
    next(Object.assign(new Error(`User '${user.id}' is lacking required roles: [${roles}]`), { status: 403, code: '403' }))
  }
}

function serveFile(contents: Map<string, { body: Buffer; type: string }>): RequestHandler {
  return (req: Request, res: Response, next: NextFunction) => {
    // `/event-queues` without its slash would resolve the page's relative URLs against `/`.
    if (req.originalUrl.split('?')[0] === PAGE_PATH) return res.redirect(301, `${PAGE_PATH}/`)
    const file = contents.get(req.path)
    if (!file || (req.method !== 'GET' && req.method !== 'HEAD')) return next()
    res.set({ 'content-type': file.type, 'cache-control': 'no-cache', 'content-security-policy': CSP, 'x-content-type-options': 'nosniff' })
    res.send(file.body)
  }
}

/** The header the page's reads carry (ops-page/page.js); its actions (POST) go without it. */
const READ_HEADER = 'x-event-queues-page'

/**
 * The page reads the operator service every few seconds: each refresh wrote three `[odata] - GET` lines (one of them
 * multi-line) into the app's request log. Its reads of the operator service are left out; its actions, the
 * service's other callers and the app's other requests are logged as before.
 */
function isPageRead(): boolean {
  const req = cds.context?.http?.req
  return req?.method === 'GET' && req.headers[READ_HEADER] === 'read' && req.baseUrl.endsWith(PAGE_PATH)
}

/**
 * Mounts the page on `app` (on cds 'bootstrap', before the protocol adapters): CAP's documented middlewares run
 * first (`cds.middlewares.before`: context and the app's configured authentication), its error middleware last, so
 * the page logs in and fails the way the app's services do.
 */
export function mountOpsPage(app: Application, roles: string[]): void {
  const contents = new Map<string, { body: Buffer; type: string }>()
  for (const [url, name] of Object.entries(FILES)) {
    contents.set(url, { body: readFileSync(join(FOLDER, name)), type: TYPES[name.split('.').pop() ?? ''] })
  }
  const { before, after } = routeMiddlewares()
  app.use(PAGE_PATH, ...before, requireOperator(roles), serveFile(contents), ...after)
  leaveOutOfRequestLog('odata', isPageRead)
}

/** One info line once the app listens: where the page is, and who may open it (a new user finds it from the log). */
export function announceOpsPage(url: string, roles: string[]): void {
  LOG.info(`ops page: ${url}${PAGE_PATH}/ (users with role ${roles.join(' or ')})`)
}
