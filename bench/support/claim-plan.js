const path = require('path')
const { REPO } = require('./app')

/**
 * The plan PostgreSQL runs the claim with, on a database holding `backlog` due messages: the plugin's own claim
 * statement (lib/store/statements.js) with the indexes the runner creates at start, after ANALYZE (as autovacuum
 * would have run it on a table of that size), executed by EXPLAIN ANALYZE in a transaction that is rolled back.
 */
async function claimPlan(client, limit) {
  const statements = require(path.join(REPO, 'lib', 'store', 'statements'))
  const { ownRowsSql } = require(path.join(REPO, 'lib', 'store', 'rules'))
  const { postgres } = require(path.join(REPO, 'lib', 'store', 'postgres'))
  await indexAndAnalyze(client)
  const now = new Date().toISOString()
  const { sql, params } = statements.claim(ownRowsSql(undefined), ownRowsSql(undefined, 'e.'), postgres, 'bench', now, Date.now() + 3600_000, limit, [])
  await client.query('BEGIN')
  try {
    const { rows } = await client.query({ text: `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ${postgres.prepare(sql)}`, values: params })
    return rows.map(r => r['QUERY PLAN'])
  } finally {
    await client.query('ROLLBACK')
  }
}

/** The indexes the runner creates at start, and ANALYZE, as autovacuum would have run it on a table of that size. */
async function indexAndAnalyze(client) {
  const { ensureIndexes } = require(path.join(REPO, 'lib', 'store', 'indexes'))
  const { postgres } = require(path.join(REPO, 'lib', 'store', 'postgres'))
  await ensureIndexes({
    indexNames: async () => new Set((await client.query(postgres.indexesOf('cds_outbox_Messages'))).rows.map(r => r.name.toLowerCase())),
    run: sql => client.query(sql)
  })
  await client.query('ANALYZE cds_outbox_Messages')
}

module.exports = { claimPlan, indexAndAnalyze }
