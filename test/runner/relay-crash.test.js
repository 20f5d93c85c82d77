const path = require('path')
const { onPostgres, onPortableStore } = require('../support/app')
const { consumerApps, exited, pending } = require('../support/consumer-apps')
const { waitFor } = require('../support/wait')

// The relay crash the outbox pattern warns about (issue 23): the sender's relay publishes an event and dies before
// it records the message as done, so after the restart it publishes the event again. The re-publish carries the
// same CloudEvents id, and the receiving app's inbox drops it: its subscriber runs once. Two processes, each an app
// with a database of its own, and CAP's file-based-messaging between them as the broker.
const { dir, database, start } = consumerApps('relay-crash')
const bus = { kind: 'file-based-messaging', file: path.join(dir, 'bus'), format: 'cloudevents' }

const printed = (child, what) => [...child.output.matchAll(new RegExp(`${what} (\\S+)`, 'g'))].map(m => m[1])

describe('a relay crash between publishing and completing', () => {
  test("the re-publish after the restart carries the same id, and the receiver's inbox drops it: its subscriber runs once", async () => {
    const receiver = await start('receiver', await database('receiver'), { ROLE: 'receiver' }, { bus: { ...bus, inboxed: true } }, true)
    const senderDb = await database('sender')
    const sender = await start('sender', senderDb, { ROLE: 'sender', CRASH_AFTER_PUBLISH: 'yes' }, { bus }, true)

    const res = await fetch(`${sender.url}/odata/v4/target/act`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ value: 'o-1' }) })
    expect(res.status).toBe(200)
    await exited(sender)
    expect(sender.signalCode).toBe('SIGKILL')
    expect(sender.output).toMatch(/published orders\/paid/)

    // the relay again, on the sender's database: the message's claim expires, and it is published again
    const restarted = await start('sender-again', senderDb, { ROLE: 'sender' }, { bus })
    await waitFor(() => /published/.test(restarted.output), { timeout: 30000, what: 'the re-publish' })
    await waitFor(async () => (await pending(restarted)).length === 0, { timeout: 30000, what: "the sender's queue to empty" })

    // the receiver got both copies under one id; the second one was a redelivery of a processed ID, counted and dropped
    await waitFor(() => printed(receiver, 'inbound').length === 2, { timeout: 30000, what: 'both copies at the receiver' })
    const [first, second] = printed(receiver, 'inbound')
    expect(second).toBe(first)
    // The killed sender left file-based-messaging's lock file behind: the receiver reads both copies at once, and
    // hands them over at the same time. The native store's upsert waits for the first and counts the second; on
    // PostgreSQL the portable store's INSERT fails instead (the broker would redeliver it; this one drops it).
    if (!(onPostgres() && onPortableStore())) {
      const receipt = async () => (await (await fetch(`${receiver.url}/receipts`)).json()).find(r => JSON.parse(r.ID).id === first)
      await waitFor(async () => (await receipt())?.duplicates === 1, { timeout: 30000, what: 'the redelivery counted' })
    }
    // every copy the inbox took has run once its inbox is empty
    await waitFor(async () => printed(receiver, 'received').length > 0 && (await pending(receiver)).length === 0, { timeout: 30000, what: "the receiver's inbox to empty" })
    expect(printed(receiver, 'received')).toEqual([first])
    const paid = await (await fetch(`${receiver.url}/odata/v4/target/Records?$filter=kind eq 'paid'`)).json()
    expect(paid.value.map(r => r.note)).toEqual([first])
  }, 240000)
})
