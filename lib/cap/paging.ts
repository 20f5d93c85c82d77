/**
 * CAP internal: the OData adapter pages a collection by the query's `SELECT.limit.rows` as the request's `before`
 * handlers leave it. CAP's own paging handler (`@cds.query.limit`, default 1000 rows) sets it before any other, and
 * the adapter answers with an `@odata.nextLink` when the result fills it; a handler that lowers it further makes
 * smaller pages with the same links, and a client that follows them gets every row.
 * Contract: test/cap/cap-contract.test.js "paging".
 */

interface PagedQuery {
  SELECT?: { one?: boolean; limit?: { rows?: { val?: number } | number } }
}

/** Pages the collection that `query` reads at `rows` rows at most (a single row's read is left alone). */
export function limitPage(query: unknown, rows: number): void {
  const select = (query as PagedQuery | undefined)?.SELECT
  if (!select || select.one) return
  const limit = (select.limit ??= {})
  const given = typeof limit.rows === 'number' ? limit.rows : limit.rows?.val
  limit.rows = { val: given === undefined ? rows : Math.min(given, rows) }
}
