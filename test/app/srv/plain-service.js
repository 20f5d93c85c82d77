const cds = require('@sap/cds')

/** A service that is only required (not served), configured in package.json with various queue settings. */
module.exports = class PlainService extends cds.Service {}
