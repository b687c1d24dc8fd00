import { describe, expect, it } from 'vitest';
import { parseBrokersUrl } from '../../../src/ha/brokers-url.js';
import { displaySource, parseSource } from '../../../src/dr/config.js';

describe('ha-brokers-url', () => {
  it('reads hosts, ports, credentials and the amqp: prefix', () => {
    expect(parseBrokersUrl('amqp://ha/pw@a:5673,b,[::1]:5674')).toEqual({
      endpoints: [{ host: 'a', port: 5673 }, { host: 'b', port: 5672 }, { host: '::1', port: 5674 }],
      user: 'ha',
      password: 'pw',
      tls: false,
    });
  });

  it('amqps: in front makes every address TLS, 5671 by default', () => {
    for (const url of ['amqps://ha/pw@a,b:5681', 'AMQPS:ha/pw@a,amqps:b:5681', 'amqps:ha/pw@amqps://a,b:5681']) {
      expect(parseBrokersUrl(url), url).toEqual({ endpoints: [{ host: 'a', port: 5671 }, { host: 'b', port: 5681 }], user: 'ha', password: 'pw', tls: true });
    }
  });

  it('refuses a URL mixing amqp: and amqps: addresses: the password would go in clear to some brokers', () => {
    for (const url of ['a:5672, amqps://b:5671', 'amqps:a,amqp:b', 'amqp:a,amqps:b']) {
      expect(() => parseBrokersUrl(url), url).toThrow(/every address of a URL uses one scheme/);
    }
  });

  it('a DR source keeps its scheme, in the journal and in status, and never its password', () => {
    expect(parseSource('amqps://dr/secret@a:5671,b')).toEqual({ source: 'amqps:dr@a:5671,b:5671', password: 'secret' });
    expect(parseSource('dr/secret@a:5672')).toEqual({ source: 'dr@a:5672', password: 'secret' });
    expect(displaySource('amqps:dr@a:5671,b:5671')).toBe('amqps:a:5671,b:5671');
    expect(displaySource('dr@a:5672')).toBe('a:5672');
    expect(parseBrokersUrl('amqps:dr/secret@a:5671').tls).toBe(true);
  });
});
