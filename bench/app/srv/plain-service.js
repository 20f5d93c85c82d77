const cds = require('@sap/cds')

/** A service that is only required, not served: the mixed scenario's ten queued services (Mixed0 … Mixed9). */
module.exports = class PlainService extends cds.Service {}
