const cds = require('@sap/cds')

/**
 * The app's own service: `enqueue` queues work in the caller's tenant, as an app's request handler would; `book`
 * records done work, marked @idempotent.
 */
module.exports = class Tenant extends cds.ApplicationService {
  init() {
    this.on('enqueue', async req => {
      const work = await cds.connect.to('Work')
      const { count, first = 0 } = req.data
      for (let seq = first; seq < first + count; seq++) await work.emit('record', { seq })
    })
    this.on('book', async req => {
      const ID = cds.utils.uuid()
      await INSERT.into('mt.Done').entries({ ID, tenant: cds.context.tenant, seq: req.data.seq })
      return ID
    })
    return super.init()
  }
}
