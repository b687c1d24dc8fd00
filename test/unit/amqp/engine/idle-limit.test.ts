// The connection's idleLimitMs: how long a silent peer is borne, apart from the
// idle-time-out advertised in our open (which sets how often the peer heartbeats).
// A peer link sets 0 and judges silence itself, after reading what has arrived.
import { describe, expect, it } from 'vitest';
import { AMQP_HEADER, perf } from '../../../helpers/amqp-frames.js';
import { ScriptedPeer } from './scripted-peer.js';

const opened = (options = {}) => {
  const p = new ScriptedPeer(options);
  p.feed(AMQP_HEADER, perf.open());
  return p;
};

describe('engine connection - idle limit', () => {
  it('engine connection - idleLimitMs bears a silent peer that long, while the open still advertises idleTimeoutMs', () => {
    const p = opened({ idleTimeoutMs: 1000, idleLimitMs: 2000 });
    const open = p.written().find((w) => w.kind === 'frame' && w.name === 'open');
    expect(open!.kind === 'frame' && open!.fields['idle-time-out']).toBe(1000);
    p.time += 1900;
    p.conn.tick(p.time);
    expect(p.names()).toEqual([]);
    p.time += 101;
    p.conn.tick(p.time);
    expect(p.errorOf('close')).toMatchObject({ condition: 'amqp:resource-limit-exceeded' });
  });

  it('engine connection - idleLimitMs 0 never closes a silent peer', () => {
    const p = opened({ idleTimeoutMs: 1000, idleLimitMs: 0 });
    p.written();
    p.time += 3_600_000;
    p.conn.tick(p.time);
    expect(p.names()).toEqual([]);
    expect(p.conn.isOpen).toBe(true);
  });
});
