// A failed $management reply names its error beside the status, so a CLI can tell
// apart errors that share one (500 is resource-locked, disk or memory full, a
// transaction, a DR move and internal errors alike) and exit with the error's own code.
import { pino } from 'pino';
import rhea from 'rhea';
import { describe, expect, it } from 'vitest';
import { Broker } from '../../../src/broker/broker.js';
import { type ErrorCode, ErrorCatalogue, TandemError } from '../../../src/broker/errors.js';
import { ManagementNode } from '../../../src/amqp/management.js';

async function replyTo(node: ManagementNode, operation: string): Promise<Record<string, unknown>> {
  let reply: Buffer | undefined;
  const request = rhea.message.encode({ message_id: 'r-1', reply_to: 'replies', application_properties: { operation }, body: {} } as never) as Buffer;
  await node.handle(request, { user: 'admin', admin: true, connectionId: 'c-1', publishReply: (_address, bytes) => (reply = bytes) });
  expect(reply).toBeDefined();
  return (rhea.message.decode(reply!) as { application_properties: Record<string, unknown> }).application_properties;
}

describe('management replies - the error is named', () => {
  const broker = new Broker();
  const node = new ManagementNode({ broker, connections: () => [], closeConnection: () => false, status: () => ({}) } as never, pino({ level: 'silent' }));
  const codes = Object.keys(ErrorCatalogue) as ErrorCode[];
  for (const code of codes) node.register(`FAIL-${code}`, () => Promise.reject(new TandemError(code, `failed as ${code}`)));

  it('every catalogued error travels as its status and its code', async () => {
    for (const code of codes) {
      const props = await replyTo(node, `FAIL-${code}`);
      expect(props['statusCode']).toBe(ErrorCatalogue[code].managementStatus);
      expect(props['errorCode']).toBe(code);
    }
  });

  it('a success names no error', async () => {
    node.register('SUCCEED', () => ({ ok: true }));
    const props = await replyTo(node, 'SUCCEED');
    expect(props['statusCode']).toBe(200);
    expect(props['errorCode']).toBeUndefined();
  });
});
