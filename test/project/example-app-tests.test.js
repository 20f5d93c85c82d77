const { suiteDatabase, projectQueue } = require('../support/app')

// The example app's own tests (examples/travel/test: cds.test with cds-event-queues/test, every message delivered
// twice in its [test] profile), as its developers run them there with `npm test`; here on each jest project's
// database and store, so the helpers and the test mode are checked as a project uses them, on all four.
const { db } = suiteDatabase()
process.env.CDS_CONFIG = JSON.stringify({ requires: { db, queue: projectQueue() } })
require('../../examples/travel/test/travel.test.js')
