const cds = require('@sap/cds')

/** Orders reduce the stock, tell the reviews system (a queued remote call) and publish an event (outboxed messaging). */
module.exports = class CatalogService extends cds.ApplicationService {
  async init() {
    const { Books, Notes } = this.entities
    const reviews = await cds.connect.to('ReviewsService')
    const messaging = await cds.connect.to('messaging')

    this.on('submitOrder', async req => {
      const { book, quantity } = req.data
      await UPDATE(Books, book).with({ stock: { '-=': quantity } })
      await reviews.send('POST', '/orders', { book, quantity })
      await messaging.emit('OrderSubmitted', { book, quantity })
    })

    messaging.on('OrderSubmitted', async msg => {
      await INSERT.into(Notes).entries({ ID: cds.utils.uuid(), kind: 'OrderSubmitted', message: String(msg.data.book) })
    })

    await super.init()
  }
}
