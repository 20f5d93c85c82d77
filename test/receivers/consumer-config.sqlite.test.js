const { execFile } = require('child_process')
const path = require('path')
const { APP } = require('../support/app')

// The consumer half's options (README, the consumer half) are checked when the app starts, like every option: a
// wrong value stops the start with an error naming the option, the value and what is allowed.

/** Boots the test app in a new process with `requires` merged in; resolves to its exit code and output. */
function boot(requires) {
  const config = { requires: { db: { kind: 'sqlite', credentials: { url: ':memory:' } }, ...requires } }
  return new Promise(resolve => {
    execFile(process.execPath, [path.join(__dirname, '..', 'support', 'boot-child.js')], {
      cwd: APP, env: { ...process.env, CDS_CONFIG: JSON.stringify(config) }, timeout: 60000
    }, (error, stdout, stderr) => resolve({ code: error ? error.code : 0, stdout, stderr }))
  })
}

/** Serves the operations of a service `Annotated` of `definitions` marked @idempotent, as the plugin does when CAP serves it. */
function serveAnnotated(definitions) {
  const cds = require('@sap/cds')
  const { serveIdempotent } = require('../../lib/receipts/idempotent')
  const model = cds.linked(cds.compile.for.nodejs(cds.compile(`service Annotated { ${definitions} }`)))
  serveIdempotent(new cds.ApplicationService('Annotated', model), { store: () => undefined, appid: undefined, retention: 1000 })
}

describe('configuration of the consumer half', () => {
  test.each([
    [{ queue: { receiptRetention: '10ms' } }, `Invalid cds.requires.queue.receiptRetention: "10ms". Expected a duration of at least 1 s such as '7d'.`],
    [{ OwnQueue: { impl: 'srv/plain-service.js', outboxed: { receiptRetention: 'forever' } } }, `Invalid cds.requires.OwnQueue.outboxed.receiptRetention: "forever". Expected a duration of at least 1 s such as '7d'.`],
    [{ inbox: { kind: 'local-messaging', inboxed: { messageId: 'body.id' } } }, `Invalid cds.requires.inbox.inboxed.messageId: "body.id". Expected 'headers.<name>' (e.g. 'headers.x-event-id'), 'data.<path>' (e.g. 'data.event.ID'), a list of them, or false.`],
    [{ inbox: { kind: 'local-messaging', inboxed: { dedupe: true } } }, `Invalid cds.requires.inbox.inboxed: {"dedupe":true}. Expected true, or an object { messageId } whose messageId is 'headers.<name>', 'data.<path>', a list of them, or false.`],
    [{ Plain: { impl: 'srv/plain-service.js', idempotencyKey: 'Idempotency Key' } }, `Invalid cds.requires.Plain.idempotencyKey: "Idempotency Key". Expected true (the header Idempotency-Key), a header name like 'X-Request-ID', or false.`]
  ])('%j fails the start with an error naming option, value and what is allowed', async (requires, message) => {
    const { code, stderr } = await boot(requires)
    expect(code).not.toBe(0)
    expect(stderr).toContain(message)
  })

  test('valid values start the app', async () => {
    const { code, stderr } = await boot({
      queue: { receiptRetention: '2d' },
      inbox: { kind: 'local-messaging', inboxed: { messageId: ['headers.x-event-id', 'data.event.ID'] } },
      Plain: { impl: 'srv/plain-service.js', idempotencyKey: 'X-Request-ID' }
    })
    expect(stderr).not.toMatch(/Invalid|Unknown option|has no effect/)
    expect(code).toBe(0)
  })

  test.each([
    ["@idempotent: 'yes' action book();", `Invalid @idempotent of action Annotated.book: "yes". Expected true.`],
    ['@idempotent function quote() returns Integer;', 'Invalid @idempotent of function Annotated.quote: true. Expected no annotation: functions are read with GET and change nothing.'],
    ["@idempotent: ['READ'] entity Things { key ID : Integer; }", `Invalid @idempotent of entity Annotated.Things: ["READ"]. Expected true, or a list of 'CREATE', 'UPDATE', 'UPSERT', 'DELETE'.`]
  ])('serving %s fails with an error naming the operation, the value and what is allowed', (definitions, message) => {
    expect(() => serveAnnotated(definitions)).toThrow(message)
  })

  test("@idempotent: true on an action, or a list of an entity's writes, is served", () => {
    expect(() => serveAnnotated("@idempotent: ['CREATE'] entity Things { key ID : Integer; } @idempotent action book();")).not.toThrow()
  })

  test.each([
    ['entity Things { key ID : Integer; @idempotent name : String; }', '@idempotent on element Annotated.Things.name has no effect: @idempotent marks actions and the writes of entities'],
    ['@idempotency action book();', '@idempotency on Annotated.book (did you mean @idempotent?) has no effect: @idempotent marks actions and the writes of entities'],
    ["@Idempotent entity Things { key ID : Integer; }", '@Idempotent on Annotated.Things (did you mean @idempotent?) has no effect'],
    ['entity Things { key ID : Integer; } actions { @idempotnt action cancel(); }', '@idempotnt on Annotated.Things.cancel (did you mean @idempotent?) has no effect']
  ])('serving %s warns that the mark does nothing, and where it is', (definitions, message) => {
    const LOG = require('@sap/cds').log('queue')
    const warnings = []
    const spy = jest.spyOn(LOG, 'warn').mockImplementation((...args) => void warnings.push(args.join(' ')))
    try {
      serveAnnotated(definitions)
    } finally {
      spy.mockRestore()
    }
    expect(warnings).toEqual([expect.stringContaining(message)])
  })
})
