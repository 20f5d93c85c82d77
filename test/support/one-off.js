/**
 * Another process of the test app that does one thing and exits, without serving (its runner never starts), as a
 * script, a migration or an instance of an older version would. ONE_OFF says what:
 * - `queue-ext`: `cds.queued(Ext, { maxAttempts: 3 })` sends POST /hooks in a transaction (a queue only this process knows);
 * - `insert`: inserts the rows in ROWS (JSON) into cds.outbox.Messages as they are, with CQL;
 * - `deploy`: deploys the model, as `cds deploy` does before an app is started.
 */
const path = require('path')

process.chdir(path.join(__dirname, '..', 'app'))
const cds = require('@sap/cds')

const actions = {
  'queue-ext': async () => {
    const ext = cds.queued(await cds.connect.to('Ext'), { maxAttempts: 3 })
    await cds.tx(() => ext.send('POST', '/hooks', { from: 'one-off' }))
  },
  insert: async () => {
    const rows = JSON.parse(process.env.ROWS)
    await cds.tx(() => INSERT.into('cds.outbox.Messages').entries(rows))
  },
  deploy: () => cds.deploy('*').to(cds.db)
}

async function main() {
  await cds.plugins
  cds.model = cds.compile.for.nodejs(await cds.load('*'))
  await cds.connect.to('db')
  await actions[process.env.ONE_OFF]()
}

main().then(
  () => process.exit(0),
  e => {
    console.error(e)
    process.exit(1)
  }
)
