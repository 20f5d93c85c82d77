const cds = require('@sap/cds')

/**
 * The queued service `Work`: its handler records in the tenant's database which tenant it ran for. WORK_MS (the
 * environment) makes it wait that long first, or until its signal aborts.
 */
module.exports = class Work extends cds.Service {
  init() {
    this.on('record', async req => {
      const ms = Number(process.env.WORK_MS ?? 0)
      if (ms) await new Promise(resolve => (setTimeout(resolve, ms).unref(), req.queue.signal.addEventListener('abort', resolve)))
      await INSERT.into('mt.Done').entries({ ID: cds.utils.uuid(), tenant: cds.context.tenant, seq: req.data.seq })
    })
    return super.init()
  }
}
