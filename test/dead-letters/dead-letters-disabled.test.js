const { startApp } = require('../support/app')
const cds = require('@sap/cds')

const app = startApp({ requires: { 'dead-letter-queue': false }, log: { levels: { error: 'error' } } })

describe('dead letter service switched off', () => {
  test('"dead-letter-queue": false leaves the service out of the model and out of the server', async () => {
    expect(cds.model.definitions.EventQueuesService).toBeUndefined()
    expect(cds.services.EventQueuesService).toBeUndefined()
    const res = await app.axios.get('/odata/v4/event-queues/DeadOutboxMessages', { validateStatus: () => true })
    expect(res.status).toBe(404)
    // nor is the ops page served, which would have nothing to show
    expect((await app.axios.get('/event-queues/', { validateStatus: () => true })).status).toBe(404)
    // the queue itself is unaffected
    expect(cds.model.definitions['cds.outbox.Messages']).toBeDefined()
  })
})
