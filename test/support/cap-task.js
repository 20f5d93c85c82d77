/**
 * An app on CAP's built-in queue WITHOUT the plugin (test/cap-app) registers a recurring task at boot, as capire's
 * "Scheduling" shows for the installed @sap/cds (9: `srv.schedule.task(event).every(…)`, 10: `srv.schedule(event)
 * .every(…)`), lets CAP's own runner run it once, and exits: its row, as CAP leaves it for the next occurrence, is what
 * an app switching to the plugin finds. TASK (the event and task name), EVERY and DATA (JSON) say what to schedule.
 */
const path = require('path')

process.chdir(path.join(__dirname, '..', 'cap-app'))
const cds = require('@sap/cds')

async function main() {
  cds.model = cds.compile.for.nodejs(await cds.load('*'))
  await cds.connect.to('db')
  const srv = await cds.serve('Target')
  const { TASK, EVERY, DATA = '{}' } = process.env
  const ran = new Promise(resolve => srv.on(TASK, resolve))
  // cds 9 names tasks with schedule.task(); in cds 10 every schedule is a task
  const schedule = srv.schedule.task ?? srv.schedule
  await cds.tx(() => schedule.call(srv, TASK, JSON.parse(DATA)).every(EVERY))
  await ran
  // CAP's runner writes the next occurrence after the run: flush() resolves once that processing has ended.
  await cds.queued(srv).flush()
}

main().then(
  () => process.exit(0),
  e => {
    console.error(e)
    process.exit(1)
  }
)
