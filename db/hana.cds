using from './outbox';

/**
 * SAP HANA only (loaded through `cds.requires.kinds.hana.model` in the plugin's package.json): the index the portable
 * store's claim needs, as `cds build --for hana` generates it (`.hdbindex`). CDS has no plain index declaration; a
 * unique constraint is one, and it can never be violated here because it includes the key. On SQLite and PostgreSQL
 * the runner creates its indexes itself (lib/store/indexes.ts), so this file is not part of their models.
 */
annotate cds.outbox.Messages with @assert.unique.due: [appid, dueAt, ID];
