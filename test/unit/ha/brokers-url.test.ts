import { describe, expect, it } from 'vitest';
import { parseBrokersUrl } from '../../../src/ha/brokers-url.js';

describe('ha-brokers-url', () => {
  it('reads hosts, ports, credentials and the amqp: prefix', () => {
    expect(parseBrokersUrl('amqp://ha/pw@a:5673,b,[::1]:5674')).toEqual({
      endpoints: [{ host: 'a', port: 5673 }, { host: 'b', port: 5672 }, { host: '::1', port: 5674 }],
      user: 'ha',
      password: 'pw',
    });
  });

  it('refuses amqps: (HA links have no TLS yet) instead of connecting in clear', () => {
    for (const url of ['amqps://a:5671,b:5671', 'amqps:a', 'a:5672, amqps://b:5671', 'AMQPS://ha/pw@a']) {
      expect(() => parseBrokersUrl(url), url).toThrow(/amqps: is not supported/);
    }
  });
});
