const fs = require('fs')
const os = require('os')
const path = require('path')

const APP = path.join(__dirname, '..', 'app')

function isObject(x) {
  return x && typeof x === 'object' && !Array.isArray(x)
}

function merge(target, source) {
  for (const [key, value] of Object.entries(source)) {
    target[key] = isObject(value) && isObject(target[key]) ? merge({ ...target[key] }, value) : value
  }
  return target
}

/** A new, empty SQLite file for one suite (a real file: the queue's guarantees are about durable storage). */
function newDatabaseFile() {
  return path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'event-queues-')), 'db.sqlite')
}

/**
 * Starts the test app with cds.test on its own SQLite file, with `config` merged over the app's package.json.
 * Must be called at the top of a suite, before cds.env is read.
 */
function startApp(config = {}, { dbFile = newDatabaseFile(), deploy = true } = {}) {
  process.env.CDS_CONFIG = JSON.stringify(merge({ requires: { db: { kind: 'sqlite', credentials: { url: dbFile } } } }, config))
  process.env.TEST_APP_DEPLOY = deploy ? 'yes' : 'no'
  const cds = require('@sap/cds')
  const test = cds.test(APP)
  test.dbFile = dbFile
  return test
}

module.exports = { APP, startApp, newDatabaseFile, merge }
