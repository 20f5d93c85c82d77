const cds = require('@sap/cds')

/**
 * Inserts `row` into `table` with plain SQL in the current transaction. Not CQL INSERT: on @cap-js/postgres 2.3 a CQL
 * INSERT cut off by a database restart can throw outside any promise and stop the process (README, "Failures and
 * shutdown") — a known upstream crash the checker is not about, so the app's own writes avoid it.
 */
function insert(table, row) {
  const columns = Object.keys(row).filter(c => row[c] !== undefined)
  let n = 0
  const marks = columns.map(() => (cds.db.kind === 'postgres' ? `$${++n}` : '?'))
  return cds.run(`INSERT INTO ${table} (${columns.join(', ')}) VALUES (${marks.join(', ')})`, columns.map(c => row[c]))
}

module.exports = { insert }
