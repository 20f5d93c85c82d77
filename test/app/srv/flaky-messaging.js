const cds = require('@sap/cds')

/**
 * A messaging adapter of the app's own whose broker fails in a way the plugin cannot tell apart (a plain Error, no
 * code), while `broker.down` is set; what it publishes is kept in `broker.published`. The broker's state lives on the
 * class, for the suite that turns it off and on.
 */
class FlakyMessaging extends cds.MessagingService {
  async handle(msg) {
    if (msg.inbound) return super.handle(msg)
    if (FlakyMessaging.broker.down) throw new Error('the broker answered something unexpected')
    FlakyMessaging.broker.published.push(msg.data)
  }
}
FlakyMessaging.broker = { down: false, published: [] }

module.exports = FlakyMessaging
