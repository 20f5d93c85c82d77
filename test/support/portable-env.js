// setupFiles of the jest projects "sqlite-portable" and "postgres-portable": the whole suite again, on the portable
// store (CQL only, as on SAP HANA). startApp and the child processes of instances.js merge TEST_QUEUE into
// cds.requires.queue.
process.env.TEST_QUEUE = JSON.stringify({ store: 'portable' })
