const fs = require('fs')
const path = require('path')
const { consumerApps, exited, pending } = require('../support/consumer-apps')
const { waitFor } = require('../support/wait')

// Exactly-once effects between two CAP apps (issue 23, items 1 and 3): a queued call of one app (the sender) to an
// action of another (the receiver) marked @idempotent, over HTTP on 127.0.0.1. The sender is killed (SIGKILL) after
// the receiver committed and before the sender recorded the call as done: its retry carries the same
// Idempotency-Key, and the receiver answers it from its record without running the action again.
const { dir, database, start } = consumerApps('exactly-once')

/** The records of `kind` in the app at `url`, read through its own OData service. */
async function records(url, kind) {
  const res = await fetch(`${url}/odata/v4/target/Records?$filter=kind eq '${kind}'`)
  return (await res.json()).value
}

describe('exactly-once effects between two CAP apps', () => {
  test("a queued call whose sender is killed between the receiver's commit and its own runs the receiver's action once", async () => {
    const killFile = path.join(dir, 'sender.pid')
    const receiver = await start('receiver', await database('receiver'), { ROLE: 'receiver', KILL_FILE: killFile }, {}, true)
    const senderDb = await database('sender')
    const remote = { ReceiverApi: { kind: 'odata', credentials: { url: `${receiver.url}/odata/v4/receiver` }, outboxed: true, idempotencyKey: true } }
    const sender = await start('sender', senderDb, { ROLE: 'sender', REMOTE: 'yes' }, remote, true)
    fs.writeFileSync(killFile, String(sender.pid))

    const res = await fetch(`${sender.url}/odata/v4/target/act`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ value: 'LH400' }) })
    expect(res.status).toBe(200)
    // the receiver committed the booking, then killed the sender before answering it
    await exited(sender)
    expect(sender.signalCode).toBe('SIGKILL')
    expect(await records(receiver.url, 'booking')).toHaveLength(1)

    // the sender again, on its database: the call's claim expires and it is retried with the same key
    const restarted = await start('sender-again', senderDb, { ROLE: 'sender', REMOTE: 'yes' }, remote)
    const attempts = () => [...receiver.output.matchAll(/attempt (\S+)/g)].map(m => m[1])
    await waitFor(() => attempts().length >= 2, { timeout: 30000, what: 'the retry of the killed sender' })
    const [first, retry] = attempts()
    expect(first).toMatch(/^"[0-9a-f-]{36}"$/)
    expect(retry).toBe(first)
    // the retry got the recorded response: the sender's queue is empty, the action ran once
    await waitFor(async () => (await pending(restarted)).length === 0, { timeout: 30000, what: "the sender's queue to empty" })
    expect(await records(receiver.url, 'booking')).toHaveLength(1)
  }, 240000)
})
