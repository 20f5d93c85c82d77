const { facts } = require('./facts')
const { I1, I2, I3, I5 } = require('./messages')
const { I4 } = require('./order')
const { I6 } = require('./claims')
const { I7, I9 } = require('./processes')
const { I8, I12 } = require('./tenants')
const { I10, I11, I13, I14 } = require('./promises')
const { I15 } = require('./stalls')
const { I16, I17, I18, I20, I21 } = require('./consumer')
const { I19 } = require('./sequences')

/** Every invariant, in the order a reader of issues 22 and 31 expects them; each returns its violations. */
const INVARIANTS = { I1, I2, I3, I4, I5, I6, I7, I8, I9, I10, I11, I12, I13, I14, I15, I16, I17, I18, I19, I20, I21 }

/** The violations of one seed's history. */
function check(result) {
  const f = facts(result)
  return Object.values(INVARIANTS).flatMap(invariant => invariant(f))
}

module.exports = { check }
