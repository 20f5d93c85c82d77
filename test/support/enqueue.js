/**
 * Another instance that only enqueues: writes COUNT `record` messages for the Target service through the plugin's
 * API, in one transaction (after deploying the model if TEST_APP_DEPLOY=yes), and exits right after the commit,
 * before its own runner could claim any of them, so every message must be picked up by the other instances.
 * PAYLOAD_BYTES: each `record` message carries a string of that many characters in `data.payload` (large messages).
 */
const path = require('path')

process.chdir(path.join(__dirname, '..', 'app'))
const cds = require('@sap/cds')

async function main() {
  await cds.plugins
  cds.model = cds.compile.for.nodejs(await cds.load('*'))
  const db = await cds.connect.to('db')
  if (process.env.TEST_APP_DEPLOY === 'yes') await cds.deploy('*').to(db)
  // Constructed, not served: no 'served' event, so this process's runner never starts.
  const queued = cds.queued(await cds.serve('Target'))
  const count = Number(process.env.COUNT)
  const keys = Number(process.env.KEYS ?? 0)
  // a new string per message: the same string would be one allocation, not the load of a real backlog
  const payload = process.env.PAYLOAD_BYTES && (() => String.fromCharCode(97 + Math.floor(Math.random() * 26)).repeat(Number(process.env.PAYLOAD_BYTES)))
  await cds.tx(async () => {
    if (keys) {
      // Ordered: COUNT `ordered` messages per key, keys interleaved, the key in the x-ordering-key header.
      for (let seq = 0; seq < count; seq++) {
        for (let k = 0; k < keys; k++) await queued.emit('ordered', { key: `k${k}`, seq }, { 'x-ordering-key': `k${k}` })
      }
    } else for (let n = 0; n < count; n++) await queued.emit('record', payload ? { n, payload: payload() } : { n })
  })
}

main().then(
  () => process.exit(0),
  e => {
    console.error(e)
    process.exit(1)
  }
)
