const cds = require('@sap/cds')

/**
 * Inserts `row` into `table` with plain SQL in the current transaction. Not CQL INSERT: on @cap-js/postgres 2.3 a CQL
 * INSERT cut off by a database restart can throw outside any promise and stop the process (README, "Failures and
 * shutdown") — a known upstream crash the checker is not about, so the app's own writes avoid it.
 */
function insert(table, row) {
  return insertAll(table, [row])
}

/** Inserts `rows` (objects with the same keys) in one statement. */
function insertAll(table, rows) {
  const columns = Object.keys(rows[0]).filter(c => rows[0][c] !== undefined)
  let n = 0
  const mark = () => (cds.db.kind === 'postgres' ? `$${++n}` : '?')
  const values = rows.map(() => `(${columns.map(mark).join(', ')})`).join(', ')
  return cds.run(`INSERT INTO ${table} (${columns.join(', ')}) VALUES ${values}`, rows.flatMap(row => columns.map(c => row[c] ?? null)))
}

module.exports = { insert, insertAll }
