/**
 * What the backends of `database` wait for, from pg_stat_activity: each `sample()` adds the active backends (the
 * sampler's own excepted) by wait_event_type to `counts` — Lock (heavyweight locks: rows, tuples, transactions),
 * LWLock (buffer and WAL internals), IO (WAL writes and fsync); an active backend that waits for nothing is on the
 * CPU — and by wait event to `counts.events` ('LWLock:WALWrite'), so a report can name the hottest ones.
 */
function waitSampler(client, database) {
  const counts = { samples: 0, lock: 0, lwlock: 0, io: 0, cpu: 0, active: 0, events: {} }
  const sample = async () => {
    const { rows } = await client.query(
      `SELECT wait_event_type AS type, wait_event AS event, count(*)::int AS n FROM pg_stat_activity
        WHERE datname = $1 AND state = 'active' AND pid <> pg_backend_pid() GROUP BY 1, 2`, [database])
    counts.samples++
    for (const { type, event, n } of rows) {
      counts.active += n
      if (type === 'Lock') counts.lock += n
      if (type === 'LWLock') counts.lwlock += n
      if (type === 'IO') counts.io += n
      if (type === null) counts.cpu += n
      else counts.events[`${type}:${event}`] = (counts.events[`${type}:${event}`] ?? 0) + n
    }
  }
  return { sample, counts }
}

module.exports = { waitSampler }
