import cds from '@sap/cds'
import { runInContext } from './contexts'

/**
 * CAP internal: a messaging service's broker adapters hand every inbound message to `srv.processInboundMsg(ctx, msg)`,
 * which marks it `inbound` (a property the stored message keeps), sets the tenant of `cds.context` and, where the
 * service is `inboxed`, queues it through the global `cds.queued` with the properties it was given (`queue` too).
 * Contract: test/cap-contract.test.js "inbound messages".
 */

/** An inbound message as a broker adapter hands it over. */
export interface InboundMessage {
  event: string
  data?: unknown
  headers?: Record<string, unknown>
  queue?: Record<string, unknown>
}

/** Whether a stored message is one an inboxed messaging service received. */
export function isInbound(request: object): boolean {
  return (request as { inbound?: unknown }).inbound === true
}

/** Hands `msg` to messaging service `serviceName` as its broker adapter would when the message arrives (again). */
export async function receive(serviceName: string, tenant: string | undefined, msg: InboundMessage): Promise<void> {
  const srv = (await cds.connect.to(serviceName)) as unknown as { processInboundMsg(ctx: object, msg: InboundMessage): Promise<unknown> }
  const Privileged = cds.User.Privileged as unknown as new () => cds.User
  // in a context of its own, as an adapter's callback runs: processInboundMsg changes the tenant of `cds.context`
  await runInContext({ tenant }, () => srv.processInboundMsg({ tenant, user: new Privileged() }, msg))
}
