// The session state machine: windows, delivery-ids, handles, and dispositions
// bounded by what is outstanding, driven by scripted frames.
import { describe, expect, it, vi } from 'vitest';
import type { Link } from '../../../../src/amqp/engine/link.js';
import { AMQP_HEADER, CODE, composite, frame, message, perf, v } from '../../../helpers/amqp-frames.js';
import { ScriptedPeer, type Written } from './scripted-peer.js';

const session = (options = {}, handler = {}) => {
  const p = new ScriptedPeer(options, handler);
  p.feed(AMQP_HEADER, perf.open(), perf.begin());
  p.written();
  return p;
};
const transfers = (w: Written[]) => w.filter((x) => x.kind === 'frame' && x.name === 'transfer');

describe('engine session - begin, end, windows', () => {
  it('engine session - a begin is answered on our channel with remote-channel, our window and handle-max', () => {
    const p = new ScriptedPeer({ session: { incomingWindow: 100, handleMax: 9 } });
    p.feed(AMQP_HEADER, perf.open(), perf.begin({ channel: 5 }));
    const begin = p.written().find((w) => w.kind === 'frame' && w.name === 'begin');
    expect(begin!.kind === 'frame' && begin!.fields).toMatchObject({ 'remote-channel': 5, 'incoming-window': 100, 'handle-max': 9 });
    p.feed(perf.end(5));
    expect(p.names()).toEqual(['end']);
    expect(p.eventNames()).toContain('peer-end');
  });

  it('engine session - transfers past the incoming window in one read end the session with amqp:session:window-violation', () => {
    const p = session({ session: { incomingWindow: 4 } });
    p.feed(perf.attach({ name: 'l', handle: 0, role: 'sender', address: 'q' }));
    p.written();
    const five = Array.from({ length: 5 }, (_, i) => perf.transfer({ handle: 0, deliveryId: i, tag: `t${i}`, settled: true }, message('m')));
    p.feed(Buffer.concat(five));
    expect(p.errorOf('end')).toMatchObject({ condition: 'amqp:session:window-violation' });
    expect(p.events.filter((e) => e.event === 'transfer')).toHaveLength(4);
  });

  it('engine session - the window is widened between reads once half is used, so a well-behaved peer never stops', () => {
    const p = session({ session: { incomingWindow: 4 } });
    p.feed(perf.attach({ name: 'l', handle: 0, role: 'sender', address: 'q' }));
    p.written();
    for (let i = 0; i < 20; i++) p.feed(perf.transfer({ handle: 0, deliveryId: i, tag: `t${i}`, settled: true }, message('m')));
    expect(p.events.filter((e) => e.event === 'transfer')).toHaveLength(20);
    const flows = p.written().filter((w): w is Written & { kind: 'frame' } => w.kind === 'frame' && w.name === 'flow');
    expect(flows.length).toBeGreaterThan(0);
    expect(flows.at(-1)!.fields['incoming-window']).toBe(4);
  });
});

describe('engine session - delivery-ids and handles', () => {
  it('engine session - issue-20 case 2: a first transfer without a delivery-id is amqp:invalid-field in a close, not an exit', () => {
    const p = session();
    p.feed(perf.attach({ name: 'l', handle: 0, role: 'sender', address: 'q' }), perf.transfer({ handle: 0, tag: 't' }, message('m')));
    expect(p.errorOf('close')).toMatchObject({ condition: 'amqp:invalid-field', description: expect.stringContaining('delivery-id') });
  });

  it('engine session - delivery-ids must follow each other in a session', () => {
    const p = session();
    p.feed(
      perf.attach({ name: 'l', handle: 0, role: 'sender', address: 'q' }),
      perf.transfer({ handle: 0, deliveryId: 7, tag: 'a', settled: true }, message('m')),
      perf.transfer({ handle: 0, deliveryId: 9, tag: 'b', settled: true }, message('m')),
    );
    expect(p.errorOf('close')).toMatchObject({ condition: 'amqp:invalid-field' });
  });

  it('engine session - a frame on an unattached handle ends the session with amqp:session:unattached-handle', () => {
    const p = session();
    p.feed(perf.transfer({ handle: 3, deliveryId: 0, tag: 't' }, message('m')));
    expect(p.errorOf('end')).toMatchObject({ condition: 'amqp:session:unattached-handle' });
    const q = session();
    q.feed(perf.flow({ handle: 3, credit: 1 }));
    expect(q.errorOf('end')).toMatchObject({ condition: 'amqp:session:unattached-handle' });
  });

  it('engine session - a handle in use ends the session; a handle over handle-max closes the connection', () => {
    const p = session();
    p.feed(perf.attach({ name: 'a', handle: 0, role: 'sender', address: 'q' }), perf.attach({ name: 'b', handle: 0, role: 'sender', address: 'q' }));
    expect(p.errorOf('end')).toMatchObject({ condition: 'amqp:session:handle-in-use' });
    const q = session({ session: { handleMax: 3 } });
    q.feed(perf.attach({ name: 'a', handle: 4, role: 'sender', address: 'q' }));
    expect(q.errorOf('close')).toMatchObject({ condition: 'amqp:connection:framing-error' });
  });
});

describe('engine session - dispositions and shared window', () => {
  /** A session where we send: the peer's receiver on handle 0 has `credit`. */
  const sending = (credit: number, count: number) => {
    let link: Link | undefined;
    const p = session({}, { onLinkAttach: (l: Link) => ((link = l), l.accept()) });
    p.feed(perf.attach({ name: 'out', handle: 0, role: 'receiver', address: 'q' }), perf.flow({ handle: 0, credit }));
    for (let i = 0; i < count; i++) link!.send(message(`m${i}`), { settled: false });
    p.written();
    return { p, link: link! };
  };

  it('engine session - our dispositions of consecutive deliveries settled alike go out as one range, in order with other frames', () => {
    const p = session();
    p.feed(perf.attach({ name: 'in', handle: 0, role: 'sender', address: 'q' }));
    p.written();
    for (let i = 0; i < 6; i++) p.feed(perf.transfer({ handle: 0, deliveryId: i, tag: `t${i}` }, message(`m${i}`)));
    const ds = p.events.filter((e) => e.event === 'transfer').map((e) => e.delivery!);
    ds[0]!.accept();
    ds[1]!.accept();
    ds[2]!.accept();
    ds[3]!.reject({ condition: 'amqp:precondition-failed', description: 'no' });
    ds[4]!.accept();
    ds[5]!.accept();
    const out = p.written().filter((w): w is Written & { kind: 'frame' } => w.kind === 'frame' && w.name === 'disposition');
    expect(out.map((w) => [w.fields.first, w.fields.last, (w.fields.state as { def: { name: string } }).def.name])).toEqual([
      [0, 2, 'accepted'],
      [3, undefined, 'rejected'],
      [4, 5, 'accepted'],
    ]);
    // A run is cut by any other frame of ours, so nothing overtakes it.
    for (let i = 6; i < 8; i++) p.feed(perf.transfer({ handle: 0, deliveryId: i, tag: `t${i}` }, message(`m${i}`)));
    const more = p.events.filter((e) => e.event === 'transfer').map((e) => e.delivery!);
    more[6]!.accept();
    (more[6]!.link as Link).flow(5);
    more[7]!.accept();
    expect(p.names()).toEqual(['disposition', 'flow', 'disposition']);
  });

  it('engine session - issue-20 case 5: a disposition first=0 last=0xffffffff settles the outstanding deliveries and visits no others', () => {
    const { p, link } = sending(10, 3);
    expect(link.session.outgoingUnsettled.size).toBe(3);
    p.feed(perf.disposition({ role: 'receiver', first: 0, last: 0xffffffff, settled: true }));
    expect(p.events.filter((e) => e.event === 'disposition').map((e) => e.delivery!.outcome)).toEqual(['accepted', 'accepted', 'accepted']);
    expect(link.session.outgoingUnsettled.size).toBe(0);
    // Nothing is outstanding now: the same range again is a no-op.
    p.feed(perf.disposition({ role: 'receiver', first: 0, last: 0xffffffff, settled: true }));
    expect(p.events.filter((e) => e.event === 'disposition')).toHaveLength(3);
  });

  it('engine session - a disposition range that wraps (first > last) covers the top of the id space and the bottom', () => {
    const { p, link } = sending(10, 2);
    p.feed(perf.disposition({ role: 'receiver', first: 0xfffffff0, last: 0, settled: true }));
    expect(link.session.outgoingUnsettled.size).toBe(1);
    expect(link.session.outgoingUnsettled.ids()).toEqual([1]);
  });

  it('engine session - dispositions naming ids never sent change nothing and look up nothing, beside 5,000 unsettled deliveries', () => {
    const { p, link } = sending(5000, 5000);
    const book = link.session.outgoingUnsettled;
    const get = vi.spyOn(book, 'get');
    const values = vi.spyOn(book, 'values');
    // Past the newest id (as the audit's frames were), and half the id space away.
    for (let k = 0; k < 200; k++) p.feed(perf.disposition({ role: 'receiver', first: 5010, last: 10_008, settled: true }));
    for (let k = 0; k < 200; k++) p.feed(perf.disposition({ role: 'receiver', first: 0x8000_0000, last: 0xffff_fff0, settled: true }));
    expect(p.events.filter((e) => e.event === 'disposition')).toHaveLength(0);
    expect(book.size).toBe(5000);
    expect(get).not.toHaveBeenCalled();
    expect(values).not.toHaveBeenCalled();
  });

  it('engine session - dispositions over settled ids amid unsettled ones cost what they settle; a range of everything settles exactly the unsettled, oldest first', () => {
    const { p, link } = sending(5000, 5000);
    const book = link.session.outgoingUnsettled;
    // Delivery 0 stays unsettled; 1..2499 are settled: a hole inside the unsettled ids.
    p.feed(perf.disposition({ role: 'receiver', first: 1, last: 2499, settled: true }));
    expect(p.events.filter((e) => e.event === 'disposition')).toHaveLength(2499);
    const get = vi.spyOn(book, 'get');
    const values = vi.spyOn(book, 'values');
    for (let k = 0; k < 200; k++) p.feed(perf.disposition({ role: 'receiver', first: 1, last: 2499, settled: true }));
    expect(p.events.filter((e) => e.event === 'disposition')).toHaveLength(2499);
    // Each settled id is stepped over once (a lookup), then the range is a step or two a frame.
    expect(get.mock.calls.length).toBeLessThanOrEqual(2499 + 2 * 200);
    expect(values).not.toHaveBeenCalled();
    p.feed(perf.disposition({ role: 'receiver', first: 0, last: 0xffffffff, settled: true }));
    const last = p.events.filter((e) => e.event === 'disposition').slice(2499);
    expect(last.map((e) => e.delivery!.id)).toEqual([0, ...Array.from({ length: 2500 }, (_, i) => 2500 + i)]);
    expect(book.size).toBe(0);
  });

  it('engine session - issue-20 case 4: two links with more credit than the session window send no more than the window, then resume on flow', () => {
    const links: Link[] = [];
    const p = new ScriptedPeer({}, { onLinkAttach: (l: Link) => (links.push(l), l.accept()) });
    p.feed(AMQP_HEADER, perf.open(), perf.begin({ incomingWindow: 2048 }));
    p.feed(perf.attach({ name: 'a', handle: 0, role: 'receiver', address: 'q', presettled: true }), perf.attach({ name: 'b', handle: 1, role: 'receiver', address: 'q', presettled: true }));
    p.feed(perf.flow({ handle: 0, credit: 2000, incomingWindow: 2048 }), perf.flow({ handle: 1, credit: 2000, incomingWindow: 2048 }));
    p.written();
    const pump = () => {
      let sent = 0;
      for (let round = 0; round < 5000; round++) {
        const l = links.find((x) => x.sendable);
        if (!l) break;
        l.send(message('x'));
        sent++;
      }
      return sent;
    };
    expect(pump()).toBe(2048);
    expect(links[0]!.session.remoteWindow).toBe(0);
    expect(transfers(p.written())).toHaveLength(2048);
    p.feed(perf.flow({ handle: 0, credit: 2000 - links[0]!.deliveryCount, deliveryCount: links[0]!.deliveryCount, nextIncomingId: 2048, incomingWindow: 2048 }));
    expect(pump()).toBe(4000 - 2048);
    expect(transfers(p.written())).toHaveLength(4000 - 2048);
  });

  it('engine session - an incoming-window and a link-credit of 2^32-1 are taken as given, not wrapped to nothing', () => {
    let link: Link | undefined;
    const p = new ScriptedPeer({}, { onLinkAttach: (l: Link) => ((link = l), l.accept()) });
    p.feed(AMQP_HEADER, perf.open(), perf.begin({ incomingWindow: 0xffffffff }), perf.attach({ name: 'o', handle: 0, role: 'receiver', address: 'q' }));
    p.feed(perf.flow({ handle: 0, credit: 0xffffffff, incomingWindow: 0xffffffff }));
    expect(link!.credit).toBe(0xffffffff);
    expect(link!.session.remoteWindow).toBe(0xffffffff);
    expect(link!.sendable).toBe(true);
  });

  it('engine session - a disposition naming deliveries the peer sent settles ours, and one for unknown ids does nothing', () => {
    const p = session();
    p.feed(perf.attach({ name: 'in', handle: 0, role: 'sender', address: 'q' }), perf.transfer({ handle: 0, deliveryId: 0, tag: 't', settled: false }, message('m')));
    const d = p.events.find((e) => e.event === 'transfer')!.delivery!;
    expect(d.link.session.incomingUnsettled.size).toBe(1);
    p.feed(frame(composite(CODE.disposition, [v.bool(false), v.uint(100), v.uint(0xffffffff), v.bool(true)])));
    expect(d.link.session.incomingUnsettled.size).toBe(1);
    d.accept();
    const disp = p.written().find((w) => w.kind === 'frame' && w.name === 'disposition');
    expect(disp!.kind === 'frame' && disp!.fields).toMatchObject({ role: true, first: 0, settled: true });
    expect(d.link.session.incomingUnsettled.size).toBe(0);
  });
});

describe('engine session - a detached link with many unsettled deliveries', () => {
  // The books are by delivery-id, not by link: a detach walked every unsettled delivery of
  // the session at once (~0.35 s for a consumer holding a million). Now in slices, an
  // event-loop turn apart (LeavingDeliveries); meanwhile a disposition naming one is dropped.
  const turn = (): Promise<void> => new Promise((r) => setImmediate(r));

  it('engine session - the deliveries of a link detached with 20,000 unsettled leave in slices; dispositions for them are dropped meanwhile, another link is served', async () => {
    const links: Link[] = [];
    const p = session({}, { onLinkAttach: (l: Link) => (links.push(l), l.accept()) });
    p.feed(perf.attach({ name: 'big', handle: 0, role: 'receiver', address: 'q' }), perf.flow({ handle: 0, credit: 20_000 }));
    p.feed(perf.attach({ name: 'small', handle: 1, role: 'receiver', address: 'q' }), perf.flow({ handle: 1, credit: 10 }));
    const [big, small] = links;
    for (let i = 0; i < 20_000; i++) big!.send(message(`m${i}`), { settled: false });
    for (let i = 0; i < 3; i++) small!.send(message(`s${i}`), { settled: false });
    p.written();
    const book = big!.session.outgoingUnsettled;
    expect(book.size).toBe(20_003);
    p.feed(perf.detach(0));
    // Not walked in the detach's own turn (the old code emptied it here, in one go).
    expect(book.size).toBeGreaterThan(3);
    // A disposition for one of them, and for the other link's, while they leave.
    p.feed(perf.disposition({ role: 'receiver', first: 0, last: 9, settled: true }), perf.disposition({ role: 'receiver', first: 20_000, last: 20_002, settled: true }));
    const told = p.events.filter((e) => e.event === 'disposition').map((e) => e.delivery!.link);
    expect(told).toEqual([small, small, small]);
    expect(book.size).toBe(20_000 - 10);
    let turns = 0;
    // Bounded: each turn visits a slice, or the books are done.
    while (book.size > 0 && turns < 1000) {
      await turn();
      turns++;
    }
    expect(book.size).toBe(0);
    // A slice a turn: several turns, the event loop free between them.
    expect(turns).toBeGreaterThanOrEqual(3);
    expect(turns).toBeLessThan(1000);
  });

  it('engine session - a link detached with few unsettled leaves the books at once, as before', () => {
    let link: Link | undefined;
    const p = session({}, { onLinkAttach: (l: Link) => ((link = l), l.accept()) });
    p.feed(perf.attach({ name: 'out', handle: 0, role: 'receiver', address: 'q' }), perf.flow({ handle: 0, credit: 100 }));
    for (let i = 0; i < 100; i++) link!.send(message(`m${i}`), { settled: false });
    p.written();
    p.feed(perf.detach(0));
    expect(link!.session.outgoingUnsettled.size).toBe(0);
  });
});

describe('engine session - links detaching one after another while a big link\'s deliveries leave', () => {
  const turn = (): Promise<void> => new Promise((r) => setImmediate(r));

  it('engine session - a detach each turn does not hold back the walk: a link detached first leaves the books within a few turns, the others as they come', async () => {
    const links: Link[] = [];
    const p = session({}, { onLinkAttach: (l: Link) => (links.push(l), l.accept()) });
    p.feed(perf.attach({ name: 'big', handle: 0, role: 'receiver', address: 'q' }), perf.flow({ handle: 0, credit: 10_000 }));
    p.feed(perf.attach({ name: 'late', handle: 1, role: 'receiver', address: 'q' }), perf.flow({ handle: 1, credit: 10 }));
    const [big, late] = links;
    for (let i = 0; i < 10_000; i++) big!.send(message(`m${i}`), { settled: false });
    // The last ids: past the first slices of every walk.
    for (let i = 0; i < 5; i++) late!.send(message(`l${i}`), { settled: false });
    p.written();
    const book = big!.session.outgoingUnsettled;
    p.feed(perf.detach(1));
    // A client attaching and detaching another link every turn (a consumer per request, or a loop).
    let turns = 0;
    for (; turns < 20 && book.size > 10_000; turns++) {
      p.feed(perf.attach({ name: `x${turns}`, handle: 2, role: 'receiver', address: 'q' }), perf.detach(2));
      await turn();
    }
    // The old walk began again at each detach, never past its first slice: 'late's stayed, and every detached link with them.
    expect(book.size).toBe(10_000);
    expect(turns).toBeLessThanOrEqual(8);
    // The big link's own are untouched, and a disposition for them is still heard.
    p.feed(perf.disposition({ role: 'receiver', first: 0, last: 1, settled: true }));
    expect(p.events.filter((e) => e.event === 'disposition').map((e) => e.delivery!.link)).toEqual([big, big]);
    p.feed(perf.detach(0));
    for (turns = 0; turns < 100 && book.size > 0; turns++) await turn();
    expect(book.size).toBe(0);
  });

  it('engine session - a link attached again with the same name and handle while its old deliveries leave keeps its own: their dispositions are heard, the walk leaves them', async () => {
    const links: Link[] = [];
    const p = session({}, { onLinkAttach: (l: Link) => (links.push(l), l.accept()) });
    p.feed(perf.attach({ name: 'big', handle: 0, role: 'receiver', address: 'q' }), perf.flow({ handle: 0, credit: 20_000 }));
    const [old] = links;
    for (let i = 0; i < 20_000; i++) old!.send(message(`m${i}`), { settled: false });
    p.written();
    const book = old!.session.outgoingUnsettled;
    p.feed(perf.detach(0));
    p.feed(perf.attach({ name: 'big', handle: 0, role: 'receiver', address: 'q' }), perf.flow({ handle: 0, credit: 10 }));
    const again = links[1]!;
    expect(again).not.toBe(old);
    for (let i = 0; i < 4; i++) again.send(message(`n${i}`), { settled: false });
    p.written();
    // One of the old link's and one of the new one's, named by one disposition: the old one's is dropped, the new one's heard.
    p.feed(perf.disposition({ role: 'receiver', first: 19_999, last: 20_000, settled: true }));
    expect(p.events.filter((e) => e.event === 'disposition').map((e) => e.delivery!.id)).toEqual([20_000]);
    for (let turns = 0; turns < 100 && book.size > 3; turns++) await turn();
    await turn();
    expect(book.ids().sort((a, b) => a - b)).toEqual([20_001, 20_002, 20_003]);
  });

  it('engine session - a session ending while a detached link\'s deliveries leave clears its books; the walk stops', async () => {
    const links: Link[] = [];
    const p = session({}, { onLinkAttach: (l: Link) => (links.push(l), l.accept()) });
    p.feed(perf.attach({ name: 'big', handle: 0, role: 'receiver', address: 'q' }), perf.flow({ handle: 0, credit: 20_000 }));
    for (let i = 0; i < 20_000; i++) links[0]!.send(message(`m${i}`), { settled: false });
    p.written();
    const book = links[0]!.session.outgoingUnsettled;
    p.feed(perf.detach(0));
    await new Promise((r) => setImmediate(r));
    expect(book.size).toBeGreaterThan(0);
    p.feed(perf.end(0));
    expect(book.size).toBe(0);
    for (let i = 0; i < 10; i++) await new Promise((r) => setImmediate(r));
    expect(book.size).toBe(0);
    expect(p.names()).toContain('end');
  });
});
