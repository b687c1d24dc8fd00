// addressGroup (src/util/host-port.ts): the key a client address is held to a share by.
// An IPv4 client (also as a dual-stack listener shows it) is its address; an IPv6 one
// is its /64 however the address is written, so a host cannot escape its share by
// taking a new address of its /64 for every socket.
import { describe, expect, it } from 'vitest';
import { defaultHandshakesPerAddress } from '../../../src/amqp/handshake-gate.js';
import { AddressTally } from '../../../src/util/address-tally.js';
import { addressGroup } from '../../../src/util/host-port.js';

describe('address group', () => {
  it('address group - IPv4 as it is, IPv4-mapped IPv6 as IPv4', () => {
    expect(addressGroup('10.1.2.3')).toBe('10.1.2.3');
    expect(addressGroup('::ffff:10.1.2.3')).toBe('10.1.2.3');
    expect(addressGroup(undefined)).toBe('unknown');
  });

  it('address group - IPv6 by its /64, whatever the spelling', () => {
    const group = '2001:db8:a:b::/64';
    for (const a of ['2001:db8:a:b::1', '2001:0db8:000a:000b:ffff:1:2:3', '2001:db8:a:b:1::', '2001:db8:a:b::1.2.3.4', '2001:DB8:A:B::9%eth0']) expect(addressGroup(a)).toBe(group);
    expect(addressGroup('2001:db8:a:c::1')).not.toBe(group);
    expect(addressGroup('::1')).toBe('0:0:0:0::/64');
    expect(addressGroup('fe80::1%lo')).toBe('fe80:0:0:0::/64');
    expect(addressGroup('1::')).toBe('1:0:0:0::/64');
    expect(addressGroup('1:2:3::4:5:6:7')).toBe('1:2:3:0::/64');
  });

  it('address tally - counts per key, each take given back once, and forgets keys that hold nothing', () => {
    const tally = new AddressTally();
    const give = [tally.take('a'), tally.take('a'), tally.take('b')];
    expect([tally.count('a'), tally.count('b')]).toEqual([2, 1]);
    give[0]!();
    give[0]!();
    expect(tally.count('a')).toBe(1);
    give[1]!();
    give[2]!();
    expect([tally.count('a'), tally.count('b')]).toEqual([0, 0]);
    expect((tally as unknown as { held: Map<string, number> }).held.size).toBe(0);
  });

  it('address group - the default share is a quarter of max-connections, at most 256, at least 8', () => {
    expect([1, 2, 20, 50, 1000, 10_000, 1_000_000].map(defaultHandshakesPerAddress)).toEqual([8, 8, 8, 12, 250, 256, 256]);
  });
});
