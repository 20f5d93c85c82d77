const fs = require('fs')
const { now } = require('./true-clock')

/**
 * The remote system's log: what a remote call would leave behind, outside any database transaction. One JSON line
 * per record, appended (O_APPEND: lines of concurrent processes do not interleave). CHAOS_LOG names the file.
 */
function record(type, fields) {
  const file = process.env.CHAOS_LOG
  if (file) fs.appendFileSync(file, JSON.stringify({ type, pid: process.pid, at: now(), ...fields }) + '\n')
}

module.exports = { record }
