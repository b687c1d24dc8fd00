// A dead letter never goes into a passive DR copy. Site B copies A's `orders` and its
// dead-letter queue `orders.dead` (alternate exchange orders.dlx, a fanout); only
// `orders` is activated at B (a drill: A goes on serving both). A message rejected at B
// leaves `orders` for orders.dlx, whose only queue at B is the passive copy of A's
// `orders.dead`: it is not put there (the copy would hold a message A never had, under
// an id of B's that A gives another message, and then skip that one as already held),
// but reported lost, as a dead letter no queue can take is. The copy stays equal to A's.
// On the old code B's copy held the dead letter and lacked A's own message.
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';
import { tandem } from '../helpers/tandem-cli.js';
import { contents, declareOrdersWithDeadLetters, depthOf, drFlush, drRowOf, range, send } from './helpers.js';

describe('DR - dead letters and passive copies', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('DR dead letters - a message rejected on an activated queue whose alternate exchange feeds only a passive copy: not put in the copy, reported lost; the copy stays equal to its source', async () => {
    const a = await TestBroker.start();
    const b = await TestBroker.start({ args: ['--metrics-port', '0'] });
    await declareOrdersWithDeadLetters(a.url);
    for (const q of ['orders', 'orders.dead']) {
      const add = await tandem(['dr', 'add', q, '--source', a.url, '-b', b.url]);
      expect(add.code, add.stderr).toBe(0);
    }
    await send(a.port, 'orders', range('o', 0, 3));
    await send(a.port, 'orders.dead', ['d0']);
    await drFlush(a.port, b.port);
    const act = await tandem(['dr', 'activate', 'orders', '--keep-source-serving', '-b', b.url]);
    expect(act.code, act.stderr).toBe(0);
    expect((await drRowOf(b.port, 'orders.dead')).state).toBe('passive');

    // A consumer at B rejects o0: a dead letter whose only target here is the passive copy.
    const c = await TestClient.connect({ port: b.port });
    const r = await c.openReceiver('orders');
    r.receiver.add_credit(1);
    const [got] = await r.next(1);
    expect(bodyOf(got!.message)).toBe('o0');
    got!.delivery.reject({ condition: 'test:rejected', description: 'rejected by the test' });
    await r.close();
    await c.close();
    await waitFor(async () => (await depthOf(b.port, 'orders')) === 2, { name: 'o0 left orders at B' });

    // A goes on with its own orders.dead: B's copy holds exactly what A's holds.
    await send(a.port, 'orders.dead', ['d1', 'd2']);
    await drFlush(a.port, b.port);
    expect(await contents(a.port, 'orders.dead')).toEqual(['d0', 'd1', 'd2']);
    expect(await depthOf(b.port, 'orders.dead')).toBe(3);
    expect(await contents(b.port, 'orders.dead', 3)).toEqual(['d0', 'd1', 'd2']);
    await waitFor(() => /a message could not go on to the alternate exchange and was dropped/.test(b.stderr + b.stdout), { name: 'the loss logged' });
    expect(b.stderr + b.stdout).toMatch(/DR copies that do not serve here: 'orders\.dead' \(passive/);
    const metrics = await (await fetch(`http://127.0.0.1:${b.metricsPort}/metrics`)).text();
    expect(metrics).toMatch(/^tandem_dead_letters_lost_total 1$/m);
    expect(b.errorLogLines).toEqual([]);
  });
});
