// What the management client (the CLI's, the agent's, a DR site's) makes of replies a
// peer chose: a status or description of the wrong type, a map with a "toString" key of
// its own (String() throws on it). Each request is answered with an error naming the
// refusal, never a lost connection. On the old code the map made the engine close the
// connection, and every pending request failed as "connection lost".
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManagementClient } from '../../../src/admin/client.js';
import { TandemError } from '../../../src/broker/errors.js';
import { HostileSite, type HostileAnswer } from '../../dr/hostile-site.js';

let site: HostileSite;
let answer: HostileAnswer = {};

beforeAll(async () => {
  site = await new HostileSite(() => answer).start();
});
afterAll(async () => {
  await site.stop();
});

const trap = { toString: 'not a function', valueOf: 7 };

describe('management client - hostile replies', () => {
  it.each<[string, HostileAnswer, RegExp]>([
    ['a description that is a map with its own toString', { status: 400, description: trap }, /object|toString/],
    ['a status that is a map with its own toString', { status: trap, description: 'no' }, /no/],
    ['a status that is a string', { status: 'teapot', description: 'no' }, /no/],
    ['a description of 100,000 characters', { status: 400, description: 'x'.repeat(100_000) }, /^x{100000}$/],
  ])('management client - %s: the request fails with a TandemError, the connection lives on', async (_what, given, message) => {
    const client = await ManagementClient.connect({ host: '127.0.0.1', port: site.port }, { timeoutMs: 5000 });
    try {
      answer = given;
      const err = await client.request('QUERY', 'queue', undefined).then(
        () => undefined,
        (e: Error) => e,
      );
      expect(err).toBeInstanceOf(TandemError);
      expect(err!.message).toMatch(message);
      // The same connection answers the next request.
      answer = { status: 200, body: { ok: true } };
      expect(await client.request('QUERY', 'queue', undefined)).toEqual({ ok: true });
    } finally {
      client.close();
    }
  });
});
