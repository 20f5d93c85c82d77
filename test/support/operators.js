/**
 * Mocked users of the suites on the operator service and the ops page: `ops` has the operator role CAP's recipe
 * requires ('internal-user'), `clerk` a role of the app only.
 */
const OPERATOR_USERS = {
  ops: { password: 'ops', roles: ['internal-user'] },
  clerk: { password: 'clerk', roles: ['booking-clerk'] }
}

module.exports = { OPERATOR_USERS }
