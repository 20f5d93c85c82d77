const cds = require('@sap/cds')

/** A messaging service of the app's own, configured only with `impl` (no kind), as a project writes an adapter of its own. */
module.exports = class CustomMessaging extends cds.MessagingService {}
