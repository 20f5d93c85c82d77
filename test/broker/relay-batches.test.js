// The relay of redis-streams in batches on the native store (SQLite, PostgreSQL): test/broker/support/relay-batches.js
require('./support/relay-batches').describeRelayBatches()
