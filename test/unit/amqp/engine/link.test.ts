// The link state machine: attach/detach, termini, credit and drain, multi-frame
// deliveries bounded by max-message-size, settlement both ways.
import { describe, expect, it } from 'vitest';
import type { Link } from '../../../../src/amqp/engine/link.js';
import { AMQP_HEADER, CODE, composite, frame, message, perf, v } from '../../../helpers/amqp-frames.js';
import { ScriptedPeer, type Written } from './scripted-peer.js';

type FrameOut = Written & { kind: 'frame' };
const frames = (p: ScriptedPeer, name: string) => p.written().filter((w): w is FrameOut => w.kind === 'frame' && w.name === name);

const withLink = (role: 'sender' | 'receiver', options = {}, handler = {}) => {
  const p = new ScriptedPeer(options, handler);
  p.feed(AMQP_HEADER, perf.open({ maxFrameSize: 512 }), perf.begin(), perf.attach({ name: 'l', handle: 0, role, address: 'q' }));
  return p;
};

describe('engine link - attach and detach', () => {
  it('engine link - the peer attach is reported with its termini decoded; ours echoes them and advertises max-message-size', () => {
    const p = withLink('sender', { maxMessageSize: 4096 });
    const link = p.events.find((e) => e.event === 'attach')!.link!;
    expect(link.role).toBe('receiver');
    expect(link.target?.def.name).toBe('target');
    expect(link.target?.fields.address).toBe('q');
    const [attach] = frames(p, 'attach');
    expect(attach!.fields).toMatchObject({ name: 'l', role: true, 'max-message-size': 4096n });
    expect((attach!.fields.target as { fields: Record<string, unknown> }).fields.address).toBe('q');
  });

  it('engine link - refusing a link attaches without a terminus and detaches with the error', () => {
    const p = withLink('sender', {}, { onLinkAttach: (l: Link) => l.refuse({ condition: 'amqp:not-found', description: 'no such queue' }) });
    const w = p.written().filter((x): x is FrameOut => x.kind === 'frame');
    const attach = w.find((x) => x.name === 'attach')!;
    expect(attach.fields.target).toBeUndefined();
    expect(p.errorOf('detach', w)).toEqual({ condition: 'amqp:not-found', description: 'no such queue' });
  });

  it("engine link - an error whose description would pass the peer's max-frame-size (512 here) is cut to fit, not sent in a frame the peer must refuse", () => {
    const long = `no queue '${'é'.repeat(400)}x'`;
    const p = withLink('sender', {}, { onLinkAttach: (l: Link) => l.refuse({ condition: 'amqp:not-found', description: long }) });
    const detach = p.written().find((x): x is FrameOut => x.kind === 'frame' && x.name === 'detach')!;
    expect(detach.size).toBeLessThanOrEqual(512);
    const error = p.errorOf('detach', [detach])!;
    expect(error.condition).toBe('amqp:not-found');
    expect(error.description).toMatch(/^no queue 'éé+\.\.\. \(cut to fit the peer's max-frame-size\)$/);
  });

  it("engine link - the peer's detach with an error is reported and answered; the handle is free again", () => {
    const p = withLink('sender');
    p.written();
    p.feed(frame(composite(CODE.detach, [v.uint(0), v.bool(true), composite(CODE.error, [v.symbol('amqp:internal-error'), v.string('bye')])])));
    expect(p.events.find((e) => e.event === 'peer-detach')!.error).toMatchObject({ condition: 'amqp:internal-error', description: 'bye' });
    expect(frames(p, 'detach')).toHaveLength(1);
    p.feed(perf.attach({ name: 'again', handle: 0, role: 'sender', address: 'q' }));
    expect(p.events.filter((e) => e.event === 'attach')).toHaveLength(2);
  });
});

describe('engine link - receiving', () => {
  it('engine link - a multi-frame delivery is assembled and reported once, whole', () => {
    const p = withLink('sender');
    const body = message('x'.repeat(300));
    p.feed(
      perf.transfer({ handle: 0, deliveryId: 0, tag: 't', more: true }, body.subarray(0, 100)),
      perf.transfer({ handle: 0, more: true }, body.subarray(100, 200)),
      perf.transfer({ handle: 0, more: false }, body.subarray(200)),
    );
    const t = p.events.filter((e) => e.event === 'transfer');
    expect(t).toHaveLength(1);
    expect(t[0]!.delivery!.payload.equals(body)).toBe(true);
  });

  it('engine link - issue-20 case 6: a multi-frame delivery growing past max-message-size detaches the link as it arrives; the session goes on', () => {
    const p = withLink('sender', { maxMessageSize: 1024 });
    p.feed(perf.attach({ name: 'other', handle: 1, role: 'sender', address: 'q' }));
    p.written();
    const chunk = Buffer.alloc(400, 1);
    p.feed(perf.transfer({ handle: 0, deliveryId: 0, tag: 't', more: true }, chunk), perf.transfer({ handle: 0, more: true }, chunk));
    expect(p.names()).toEqual([]);
    p.feed(perf.transfer({ handle: 0, more: true }, chunk));
    expect(p.errorOf('detach')).toMatchObject({ condition: 'amqp:link:message-size-exceeded' });
    expect(p.events.find((e) => e.event === 'detach')!.error).toMatchObject({ condition: 'amqp:link:message-size-exceeded' });
    // The rest of it is dropped; the next delivery on another link takes the next id.
    for (let i = 0; i < 10; i++) p.feed(perf.transfer({ handle: 0, more: true }, chunk));
    p.feed(perf.transfer({ handle: 1, deliveryId: 1, tag: 'u', settled: true }, message('ok')));
    expect(p.events.filter((e) => e.event === 'transfer').map((e) => e.link!.name)).toEqual(['other']);
  });

  it('engine link - presettled deliveries are not kept; unsettled ones are until settled', () => {
    const p = withLink('sender');
    p.feed(perf.transfer({ handle: 0, deliveryId: 0, tag: 'a', settled: true }, message('a')), perf.transfer({ handle: 0, deliveryId: 1, tag: 'b', settled: false }, message('b')));
    const [a, b] = p.events.filter((e) => e.event === 'transfer').map((e) => e.delivery!);
    expect(a!.link.session.incomingUnsettled.size).toBe(1);
    p.written();
    a!.accept(); // presettled: nothing to say
    expect(frames(p, 'disposition')).toHaveLength(0);
    b!.accept();
    expect(frames(p, 'disposition')).toHaveLength(1);
    expect(b!.link.session.incomingUnsettled.size).toBe(0);
  });

  it('engine link - a delivery beyond the credit given detaches with amqp:link:transfer-limit-exceeded', () => {
    const p = withLink('sender', {}, { onLinkAttach: (l: Link) => (l.accept(), l.flow(2)) });
    p.written();
    for (let i = 0; i < 3; i++) p.feed(perf.transfer({ handle: 0, deliveryId: i, tag: `t${i}`, settled: true }, message('m')));
    expect(p.events.filter((e) => e.event === 'transfer')).toHaveLength(2);
    expect(p.errorOf('detach')).toMatchObject({ condition: 'amqp:link:transfer-limit-exceeded' });
  });

  it('engine link - flow grants credit with our delivery-count; a sender advancing it (drain) spends the credit', () => {
    const p = withLink('sender', {}, { onLinkAttach: (l: Link) => (l.accept(), l.flow(5, true)) });
    const [flow] = frames(p, 'flow');
    expect(flow!.fields).toMatchObject({ handle: 0, 'delivery-count': 0, 'link-credit': 5, drain: true });
    const link = p.events.find((e) => e.event === 'attach')!.link!;
    p.feed(perf.flow({ handle: 0, credit: 0, deliveryCount: 5 }));
    expect(link.credit).toBe(0);
    expect(p.eventNames()).toContain('flow');
  });
});

describe('engine link - sending', () => {
  const sender = (handler = {}) => {
    let link: Link | undefined;
    const p = withLink('receiver', {}, { onLinkAttach: (l: Link) => ((link = l), l.accept()), ...handler });
    p.written();
    return { p, link: () => link! };
  };

  it("engine link - a delivery bigger than the peer's max-frame-size goes in frames of at most that size, payload intact", () => {
    const { p, link } = sender();
    p.feed(perf.flow({ handle: 0, credit: 1 }));
    const body = message('y'.repeat(2000));
    link().send(body, { settled: true });
    const t = frames(p, 'transfer');
    expect(t.length).toBeGreaterThan(3);
    expect(Buffer.concat(t.map((x) => x.payload)).equals(body)).toBe(true);
    expect(t[0]!.fields['delivery-id']).toBe(0);
    expect(t.slice(0, -1).every((x) => x.fields.more === true)).toBe(true);
    expect(t.at(-1)!.fields.more).toBe(false);
    expect(link().credit).toBe(0);
    expect(link().sendable).toBe(false);
  });

  it('engine link - a drain the host does not answer by sending spends the credit and says so in a flow', () => {
    const { p, link } = sender();
    p.feed(frame(composite(CODE.flow, [v.uint(0), v.uint(2048), v.uint(0), v.uint(2048), v.uint(0), v.uint(0), v.uint(5), undefined, v.bool(true)])));
    const [flow] = frames(p, 'flow');
    expect(flow!.fields).toMatchObject({ handle: 0, 'delivery-count': 5, 'link-credit': 0, drain: true });
    expect(link().credit).toBe(0);
  });

  it('engine link - echo is answered with our flow state', () => {
    const { p } = sender();
    p.feed(frame(composite(CODE.flow, [v.uint(0), v.uint(2048), v.uint(0), v.uint(2048), v.uint(0), v.uint(0), v.uint(3), undefined, v.bool(false), v.bool(true)])));
    const [flow] = frames(p, 'flow');
    expect(flow!.fields).toMatchObject({ handle: 0, 'link-credit': 3 });
  });

  it('engine link - credit from a receiver whose delivery-count is far ahead of ours stays a uint, so an echo can say it', () => {
    const { p, link } = sender();
    p.feed(frame(composite(CODE.flow, [v.uint(0), v.uint(2048), v.uint(0), v.uint(2048), v.uint(0), v.uint(0x7fffffff), v.uint(0xffffffff), undefined, v.bool(false), v.bool(true)])));
    expect(link().credit).toBe(0xffffffff);
    const [flow] = frames(p, 'flow');
    expect(flow!.fields).toMatchObject({ handle: 0, 'link-credit': 0xffffffff });
    expect(frames(p, 'close')).toEqual([]);
  });

  it("engine link - the peer's outcome reaches onDisposition; settling an unsettled outcome sends our settlement", () => {
    const { p, link } = sender();
    p.feed(perf.flow({ handle: 0, credit: 2 }));
    const d = link().send(message('m'), { settled: false });
    p.written();
    p.feed(frame(composite(CODE.disposition, [v.bool(true), v.uint(d.id), undefined, v.bool(false), composite(CODE.rejected, [])])));
    expect(d.outcome).toBe('rejected');
    expect(p.eventNames()).toContain('disposition');
    d.settle();
    const [disp] = frames(p, 'disposition');
    expect(disp!.fields).toMatchObject({ role: false, first: d.id, settled: true });
  });

  it('engine link - with the socket full the link is not sendable; drain of the socket makes it so and reports a flow', () => {
    const { p, link } = sender();
    p.feed(perf.flow({ handle: 0, credit: 5 }));
    p.conn.writable = false;
    expect(link().sendable).toBe(false);
    const before = p.events.filter((e) => e.event === 'flow').length;
    p.conn.drained();
    expect(link().sendable).toBe(true);
    expect(p.events.filter((e) => e.event === 'flow').length).toBe(before + 1);
  });
});
