// PeerSearch on the scripted network: which broker of a brokers-url is followed,
// and how a search ends (fatal refusal, stop, silence), apart from any stream.
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { PeerSearch, type SearchEvents } from '../../../src/peer-link/search.js';
import type { PeerSender } from '../../../src/peer-link/transport.js';
import { ScriptedNetwork } from '../../helpers/scripted-link.js';

const log = pino({ level: 'silent' });

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

interface Heard {
  following: string[];
  lost: string[];
  fatal: string[];
  refused: string[];
}

function search(net: ScriptedNetwork, hosts: string[]): { search: PeerSearch; heard: Heard } {
  const heard: Heard = { following: [], lost: [], fatal: [], refused: [] };
  const events: SearchEvents = {
    refused: (address, reason) => heard.refused.push(`${address}: ${reason}`),
    following: (link) => heard.following.push(link.address),
    message: () => undefined,
    lost: (reason) => heard.lost.push(reason),
    fatal: (reason) => heard.fatal.push(reason),
  };
  const s = new PeerSearch({
    dialer: net,
    endpoints: hosts.map((host) => ({ host, port: 5672 })),
    log,
    dial: { tls: undefined, credentials: { mechanism: 'ANONYMOUS' }, idleTimeoutMs: 1000, handshakeDeadlineMs: 500, properties: { who: 'me' } },
    self: { property: 'who', value: 'me' },
    hello: () => ({ address: '$test', properties: {}, creditWindow: 10 }),
    judge: () => ({ serving: true }),
    retryMs: 100,
    selfRetryMs: 1000,
    answerTimeoutMs: 5000,
    silenceLimitMs: 2000,
    fatalCondition: 'test:fatal',
    names: { link: 'test link', peer: 'server' },
    tlsOption: 'ha-tls',
    events,
  });
  return { search: s, heard };
}

/** A broker that serves the link; counts the links it served and saw closed. */
function serving(net: ScriptedNetwork, host: string): { served: number; closed: number } {
  const counts = { served: 0, closed: 0 };
  net.listen(`${host}:5672`, {
    properties: { who: host },
    attach: (link: PeerSender) => {
      counts.served++;
      link.accept('$test', {});
      return { flow: () => undefined, closed: () => void counts.closed++ };
    },
  });
  return counts;
}

describe('PeerSearch', () => {
  it('two brokers serving at once (a stale primary): the first is followed, the other let go', async () => {
    const net = new ScriptedNetwork(21, 5);
    const a = serving(net, 'a');
    const b = serving(net, 'b');
    const { search: s, heard } = search(net, ['a', 'b']);
    s.start();
    await vi.advanceTimersByTimeAsync(1000);
    expect(heard.following).toHaveLength(1);
    expect(a.served + b.served).toBe(2);
    // The one not followed saw its link closed; the followed one did not.
    expect(a.closed + b.closed).toBe(1);
    expect(s.address).toBe(heard.following[0]);
    s.stop();
    s.stop();
    await vi.advanceTimersByTimeAsync(1000);
    expect(a.closed + b.closed).toBe(2);
    expect(heard.lost).toEqual([]);
  });

  it('skips itself and keeps retrying a refusing broker until it serves', async () => {
    const net = new ScriptedNetwork(22, 5);
    net.listen('self:5672', { properties: { who: 'me' }, attach: () => undefined });
    let refusing = true;
    let attaches = 0;
    net.listen('b:5672', {
      properties: { who: 'b' },
      attach: (link) => {
        attaches++;
        if (refusing) {
          link.refuse({ condition: 'test:not-yet', description: 'not the primary yet' });
          return undefined;
        }
        link.accept('$test', {});
        return { flow: () => undefined, closed: () => undefined };
      },
    });
    const { search: s, heard } = search(net, ['self', 'b']);
    s.start();
    await vi.advanceTimersByTimeAsync(1000);
    expect(heard.following).toEqual([]);
    expect(heard.refused.filter((r) => r.startsWith('b:5672: not the primary yet')).length).toBeGreaterThan(3);
    expect(heard.refused.some((r) => r === 'self:5672: this is ourselves')).toBe(true);
    refusing = false;
    await vi.advanceTimersByTimeAsync(500);
    expect(heard.following).toEqual(['b:5672']);
    const tries = attaches;
    await vi.advanceTimersByTimeAsync(2000);
    // Following: no more attempts anywhere.
    expect(attaches).toBe(tries);
    s.stop();
  });

  it('a fatal refusal ends the search once, with no retry', async () => {
    const net = new ScriptedNetwork(23, 5);
    let attaches = 0;
    net.listen('a:5672', {
      properties: {},
      attach: (link) => {
        attaches++;
        link.refuse({ condition: 'test:fatal', description: 'mismatch' });
        return undefined;
      },
    });
    const { search: s, heard } = search(net, ['a']);
    s.start();
    await vi.advanceTimersByTimeAsync(3000);
    expect(heard.fatal).toEqual(['mismatch']);
    expect(attaches).toBe(1);
    expect(net.dialled).toBe(1);
  });

  it('a followed peer gone silent (a partition) is lost once, after the silence limit', async () => {
    const net = new ScriptedNetwork(24, 5);
    serving(net, 'a');
    const { search: s, heard } = search(net, ['a']);
    s.start();
    await vi.advanceTimersByTimeAsync(500);
    expect(heard.following).toEqual(['a:5672']);
    // The server's idle frames keep it alive.
    await vi.advanceTimersByTimeAsync(5000);
    expect(heard.lost).toEqual([]);
    net.partition('a:5672');
    await vi.advanceTimersByTimeAsync(5000);
    expect(heard.lost).toHaveLength(1);
    expect(heard.lost[0]).toMatch(/^nothing from the server for \d+ ms$/);
    expect(s.isFollowing).toBe(false);
    s.stop();
  });

  it('a dropped peer is lost once; unfollow and stop report nothing', async () => {
    const net = new ScriptedNetwork(25, 5);
    serving(net, 'a');
    const { search: s, heard } = search(net, ['a']);
    s.start();
    await vi.advanceTimersByTimeAsync(500);
    net.drop('a:5672');
    await vi.advanceTimersByTimeAsync(100);
    expect(heard.lost).toEqual(['connection to the server lost']);
    s.start();
    await vi.advanceTimersByTimeAsync(500);
    expect(heard.following).toHaveLength(2);
    s.unfollow();
    s.unfollow();
    s.stop();
    await vi.advanceTimersByTimeAsync(5000);
    expect(heard.lost).toHaveLength(1);
  });
});
