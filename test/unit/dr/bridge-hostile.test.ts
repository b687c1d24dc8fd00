// A DR bridge facing a source that sends numbers no position can be: refused at
// decode, the link dropped and dialled again, the copy's position untouched, and
// what is journaled when the link goes encodes. Taken as
// they were, a heartbeat's time of "soon" became the copy's position in memory, and
// the journal's record codec threw on it when the link went, in the socket's close
// event, where nothing caught it: tandemd exited. Likewise a restart or snapshot-end
// that would set a copy back below what it applied (but for a copy of its contents).
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { drRoleChange } from '../../../src/broker/broker.js';
import type { SettlementGate } from '../../../src/broker/settlement.js';
import { DrBridge } from '../../../src/dr/bridge.js';
import type { PeerDialer } from '../../../src/peer-link/transport.js';
import { encodeChange } from '../../../src/store/record-codec.js';
import { newBroker, qs } from '../broker/helpers.js';
import { message } from '../store/helpers.js';

const SOURCE = 'source:5672';
const tick = (ms = 20) => new Promise((r) => setTimeout(r, ms));

/** A dialer whose one source attaches the bridge's receiver and lets the test send it messages and close the link. */
function scriptedSource() {
  const s: { message?: (m: unknown, d: unknown) => void; disconnect?: () => void; dialled: number } = { dialled: 0 };
  const dialer = {
    dial: (_o: unknown, events: { opened(p: unknown): void; disconnected(e: unknown): void }) => {
      s.dialled++;
      setImmediate(() => events.opened({}));
      s.disconnect = () => events.disconnected(undefined);
      return {
        openReceiver: (o: { address: string }, ev: { attached(a: unknown): void; message(m: unknown, d: unknown): void }) => {
          s.message = (m, d) => ev.message(m, d);
          setImmediate(() => ev.attached({ source: { address: o.address }, properties: { 'tandem.dr.source': true } }));
          return { addCredit() {} };
        },
        abandon() {},
      };
    },
  } as unknown as PeerDialer;
  return { s, dialer };
}

/** A broker with passive DR queue 'a' of SOURCE at position 10 holding message 1, and a bridge following the scripted source. */
async function followingBridge() {
  const { broker } = newBroker();
  broker.declareQueue('a', qs({ durable: true }));
  broker.recordDr(drRoleChange('a', { source: SOURCE, mode: 'enqueue-and-dequeue', state: 'passive', epoch: 1, divergence: 0, since: 0, idFloor: 0, fill: false, exchanges: '*', tell: false }));
  broker.recordDr({ kind: 'dr-transaction', queues: ['a'], lsn: 10, time: 1, changes: [{ kind: 'enqueue', queue: 'a', message: { ...message(1), durable: true } }] });
  const { s, dialer } = scriptedSource();
  const gate = { whenSafe: (_l: number, _d: boolean, cb: (err?: Error) => void) => cb() } as unknown as SettlementGate;
  const lines: string[] = [];
  const log = pino({ level: 'info' }, { write: (line: string) => void lines.push(line) });
  const bridge = new DrBridge(SOURCE, { broker, gate, log, autoCreate: true, instanceId: 'x', password: undefined, tls: {}, dialer });
  bridge.restart();
  await tick();
  expect(bridge.state).toBe('connected');
  const outcome: string[] = [];
  const send = (props: Record<string, unknown>) => s.message!({ application_properties: { time: 2, head: 11, now: 0, ...props } }, { accept: () => outcome.push(String(props.k)) });
  return { broker, bridge, s, lines, outcome, send };
}

describe('DR bridge - a source moving a copy back', () => {
  for (const kind of ['restart', 'snapshot-end'] as const) {
    it(`${kind} below the copy's position, without a copy of its contents: refused with the reason, the link dialled again, the position kept`, async () => {
      const { broker, bridge, s, lines, outcome, send } = await followingBridge();
      send({ k: kind, lsn: 4, queues: JSON.stringify(['a']), ...(kind === 'restart' ? { floor: 2, held: JSON.stringify({ a: [] }) } : {}) });
      await tick(200);
      expect(outcome).toEqual([]);
      const refused = lines.map((l) => JSON.parse(l) as { level: number; msg: string; err?: string }).find((l) => l.msg.startsWith('DR: could not apply'));
      expect(refused).toMatchObject({ level: 50, err: `DR stream: ${kind} would move queue "a" back to source position 4; it has applied up to 10` });
      expect(s.dialled).toBeGreaterThan(1);
      expect(broker.drPositions.get('a')?.lsn).toBe(10);
      expect(bridge.queueStatus('a').pos).toBe(10);
      // A restart's drop did not happen either: the mirror keeps what it holds.
      expect(broker.queues.get('a')?.has(1)).toBe(true);
      bridge.stop();
    });
  }

  it('a copy announced by snapshot-begin may end below the position (a source behind the copy): taken', async () => {
    const { broker, bridge, s, outcome, send } = await followingBridge();
    send({ k: 'snapshot-begin', lsn: 0, queues: JSON.stringify(['a']), reason: 'ahead of this source' });
    send({ k: 'snapshot', lsn: 0 });
    send({ k: 'snapshot-end', lsn: 4, queues: JSON.stringify(['a']) });
    await tick();
    expect(outcome).toEqual(['snapshot-begin', 'snapshot', 'snapshot-end']);
    expect(broker.drPositions.get('a')?.lsn).toBe(4);
    expect(bridge.queueStatus('a').pos).toBe(4);
    // The copy showed nothing: the mirror holds what the source holds.
    expect(broker.queues.get('a')?.has(1)).toBe(false);
    expect(s.dialled).toBe(1);
    bridge.stop();
  });

  it('a restart past the position (the source went on above its reservation): taken, the mirror keeps what the source holds', async () => {
    const { broker, bridge, outcome, send } = await followingBridge();
    send({ k: 'restart', lsn: 1_000_010, queues: JSON.stringify(['a']), floor: 2, held: JSON.stringify({ a: [1, 1] }) });
    await tick();
    expect(outcome).toEqual(['restart']);
    expect(broker.drPositions.get('a')?.lsn).toBe(1_000_010);
    expect(broker.queues.get('a')?.has(1)).toBe(true);
    bridge.stop();
  });
});

describe('DR bridge - a source sending numbers no position can be', () => {
  for (const [field, value] of [['time', 'soon'], ['lsn', 11.5], ['lsn', -3], ['time', Number.NaN], ['head', 2 ** 60]] as const) {
    it(`heartbeat.${field} = ${String(value)}: refused, the link dialled again, the position kept`, async () => {
      const { broker } = newBroker();
      const journaled: string[] = [];
      // What the journal's sink does first with every durable change: encode it.
      broker.log.attach({ append: (e) => void (e.durable && journaled.push(encodeChange(e).toString('hex'))) });
      broker.declareQueue('a', qs({ durable: true }));
      broker.recordDr(drRoleChange('a', { source: SOURCE, mode: 'enqueue-and-dequeue', state: 'passive', epoch: 1, divergence: 0, since: 0, idFloor: 0, fill: false, exchanges: '*', tell: false }));
      broker.recordDr({ kind: 'dr-transaction', queues: ['a'], lsn: 10, time: 1, changes: [] });
      const { s, dialer } = scriptedSource();
      const gate = { whenSafe: (_l: number, _d: boolean, cb: (err?: Error) => void) => cb() } as unknown as SettlementGate;
      const bridge = new DrBridge(SOURCE, { broker, gate, log: pino({ level: 'silent' }), autoCreate: true, instanceId: 'x', password: undefined, tls: {}, dialer });
      bridge.restart();
      await tick();
      expect(bridge.state).toBe('connected');
      const props: Record<string, unknown> = { k: 'heartbeat', lsn: 11, time: 2, head: 11, now: 0, [field]: value };
      const outcome: string[] = [];
      s.message!({ application_properties: props }, { accept: () => outcome.push('accepted'), reject: () => outcome.push('rejected') });
      await tick();
      s.disconnect?.();
      await tick(200);
      // Not taken: the link was dropped (the source resends from the copy's position).
      expect(outcome).toEqual([]);
      expect(bridge.queueStatus('a')).toMatchObject({ pos: 10, time: 1 });
      expect(s.dialled).toBeGreaterThan(1);
      bridge.stop();
    });
  }
});
