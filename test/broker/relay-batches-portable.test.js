// The relay of redis-streams in batches on the portable store (CQL only, no savepoints): test/broker/support/relay-batches.js
require('./support/relay-batches').describeRelayBatches('portable')
