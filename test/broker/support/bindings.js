/**
 * What SAP BTP gives an app bound to a `redis-cache` instance (VCAP_SERVICES), for a server of the suite
 * (scripts/redis-server.js): CAP's `redis-messaging` reads `credentials.uri`, whose user name is BTP's placeholder.
 */

/** The binding's credentials for `server`; `tls`: on its TLS port, `rediss://` (BTP's binding has TLS on). */
function btpBinding(server, { password = server.password, tls = false, cluster_mode = false } = {}) {
  const port = tls ? server.tlsPort : server.port
  const scheme = tls ? 'rediss' : 'redis'
  return { cluster_mode, hostname: '127.0.0.1', port, password, tls, uri: `${scheme}://no-user-name-for-redis:${password}@127.0.0.1:${port}` }
}

/** VCAP_SERVICES of an app bound to one redis-cache instance with `credentials`. */
function vcapServices(credentials) {
  return JSON.stringify({ 'redis-cache': [{ label: 'redis-cache', name: 'event-queues-redis', plan: 'standard', tags: ['cache'], credentials }] })
}

module.exports = { btpBinding, vcapServices }
