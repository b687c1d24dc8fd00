// The reverse source a switchover gives the old source when the operator named none
// (src/dr/switchover.ts siteWide): the -b address, widened to every broker of this HA
// site when it is one of them, so the old source follows this site across its failovers.
import { describe, expect, it } from 'vitest';
import { siteWide } from '../../../src/dr/switchover.js';

const site = [
  { host: 'b1', port: 5672 },
  { host: 'b2', port: 5672 },
  { host: '::1', port: 5673 },
];

describe('DR switchover - the default reverse source', () => {
  it('one broker of the site: every broker of ha-brokers-url, with the -b scheme, user and password', () => {
    expect(siteWide('b1:5672', site)).toBe('b1:5672,b2:5672,[::1]:5673');
    expect(siteWide('ops@B2:5672', site)).toBe('ops@b1:5672,b2:5672,[::1]:5673');
    expect(siteWide('amqps:ops/secret@b1:5672', site)).toBe('amqps:ops/secret@b1:5672,b2:5672,[::1]:5673');
  });

  it('anything else is taken as given: another address (a VIP), another port, several brokers, a standalone site, a bad URL', () => {
    expect(siteWide('vip:5672', site)).toBe('vip:5672');
    expect(siteWide('b1:5671', site)).toBe('b1:5671');
    expect(siteWide('b1:5672,b2:5672', site)).toBe('b1:5672,b2:5672');
    expect(siteWide('b1:5672', [site[0]!])).toBe('b1:5672');
    expect(siteWide('b1:99999', site)).toBe('b1:99999');
  });
});
