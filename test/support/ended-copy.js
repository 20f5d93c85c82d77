/**
 * A PostgreSQL session that ends right when @cap-js/postgres begins the COPY of a CQL INSERT's entries (how it sends a
 * statement's stream parameters), made to happen every time. The app reaches the server through a TCP proxy of this
 * process on 127.0.0.1 that holds back the server's first CopyInResponse ("send the COPY's data"), ends that session
 * on the server (pg_terminate_backend: the FATAL 57P01 a restart or failover sends), and hands the client both
 * messages in one write, then the end of the connection: what the client reads when a restart lands right then.
 *
 * APP: `cap-app` (CAP alone, no plugin: the reproduction to report upstream) or `app` (the test app with the plugin).
 * CDS_CONFIG: `cds.requires.db`, a PostgreSQL database where test.Records is deployed. Prints one JSON line: how the
 * INSERT ended and whether the process wrote afterwards; a process that dies prints its uncaught error instead.
 */
const net = require('net')
const path = require('path')

process.chdir(path.join(__dirname, '..', process.env.APP ?? 'app'))
const cds = require('@sap/cds')

const COPY_IN_RESPONSE = 'G'
const BACKEND_KEY_DATA = 'K'

/** The server's messages in `bytes` from `offset` on: [type, start, end] of each complete one. */
function* messages(bytes, offset) {
  while (offset + 5 <= bytes.length) {
    const end = offset + 1 + bytes.readUInt32BE(offset + 1)
    if (end > bytes.length) return
    yield [String.fromCharCode(bytes[offset]), offset, end]
    offset = end
  }
}

/**
 * A proxy to the server `{ host, port }` that, on the first session that sends a CopyInResponse, calls
 * `endSession(pid)` and delivers that message with everything the server sent until it closed, in one write.
 */
function startProxy(server, endSession) {
  let held = false
  const proxy = net.createServer(client => {
    const upstream = net.connect(server.port, server.host)
    client.pipe(upstream)
    let unsent = Buffer.alloc(0) // the server's bytes not yet passed on: complete messages are, as they arrive
    let pid
    let holding
    upstream.on('data', chunk => {
      if (holding) return holding.push(chunk)
      unsent = Buffer.concat([unsent, chunk])
      let complete = 0
      for (const [type, start, end] of messages(unsent, 0)) {
        if (type === BACKEND_KEY_DATA) pid = unsent.readInt32BE(start + 5)
        if (type === COPY_IN_RESPONSE && !held) {
          held = true
          holding = [unsent.subarray(start)]
          void endSession(pid)
          break
        }
        complete = end
      }
      client.write(unsent.subarray(0, complete))
      unsent = unsent.subarray(complete)
    })
    upstream.on('end', () => {
      if (holding) client.write(Buffer.concat(holding))
      client.end()
    })
    upstream.on('error', () => client.destroy())
    client.on('error', () => upstream.destroy())
  })
  return new Promise(resolve => proxy.listen(0, '127.0.0.1', () => resolve(proxy)))
}

async function main() {
  const configured = cds.env.requires.db.credentials
  const { Client } = require('pg')
  const admin = new Client({ ...configured })
  await admin.connect()
  const proxy = await startProxy(configured, pid => admin.query('SELECT pg_terminate_backend($1)', [pid]))
  cds.env.requires.db.credentials = { ...configured, host: '127.0.0.1', port: proxy.address().port }
  await cds.plugins
  // the model, for CQL INSERT to know the entity's elements (without them it sends plain VALUES)
  cds.model = cds.compile.for.nodejs(await cds.load('*'))
  await cds.connect.to('db')
  let insert
  await cds.tx(async tx => {
    try {
      await tx.run(INSERT.into('test.Records').entries({ ID: cds.utils.uuid(), kind: 'ended-copy' }))
      insert = { inserted: true }
    } catch (e) {
      insert = { rejected: e.code ?? e.message }
    }
  }).catch(() => {}) // its commit fails too: the connection is gone
  // the process goes on: a new transaction on a new connection writes
  const ID = cds.utils.uuid()
  await INSERT.into('test.Records').entries({ ID, kind: 'after-ended-copy' })
  const written = (await SELECT.one.from('test.Records').where({ ID })) !== undefined
  await admin.end()
  return { insert, written }
}

main().then(
  result => {
    console.log(JSON.stringify(result))
    process.exit(0)
  },
  e => {
    console.error(e)
    process.exit(1)
  }
)
