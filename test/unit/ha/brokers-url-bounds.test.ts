// parseBrokersUrl bounded and strict: it read a 100,000-character host name, an empty
// user ('@h'), an empty password ('u/@h'), NUL or '/' in a host, '[zz]' as IPv6, and
// any number of brokers. Each is refused (ConfigError) with what is wrong, quoting at
// most 80 characters of the URL and never the password; what it read before still reads.
import { describe, expect, it } from 'vitest';
import { MAX_CREDENTIAL_LENGTH, MAX_ENDPOINTS, MAX_HOST_LENGTH, parseBrokersUrl } from '../../../src/ha/brokers-url.js';
import { parseSource } from '../../../src/dr/config.js';

const label63 = 'a'.repeat(63);
/** A 253-character host name: three labels of 63 and one of 61, with 3 dots. */
const longest = `${label63}.${label63}.${label63}.${'b'.repeat(61)}`;

describe('ha-brokers-url - bounds and malformed input', () => {
  it('still reads what it read: names, IPv4, bracketed IPv6 with a zone, underscores, a trailing dot, credentials', () => {
    expect(longest.length).toBe(MAX_HOST_LENGTH);
    expect(parseBrokersUrl(`u/p@${longest}:1,127.0.0.1,[fe80::1%eth0]:65535,my_broker-1.example.,h`)).toEqual({
      endpoints: [
        { host: longest, port: 1 },
        { host: '127.0.0.1', port: 5672 },
        { host: 'fe80::1%eth0', port: 65535 },
        { host: 'my_broker-1.example.', port: 5672 },
        { host: 'h', port: 5672 },
      ],
      user: 'u',
      password: 'p',
      tls: false,
    });
    const many = Array.from({ length: MAX_ENDPOINTS }, (_, i) => `b${i}`).join(',');
    expect(parseBrokersUrl(many).endpoints).toHaveLength(MAX_ENDPOINTS);
    const cred = 'x'.repeat(MAX_CREDENTIAL_LENGTH);
    expect(parseBrokersUrl(`${cred}/${cred}@h`)).toMatchObject({ user: cred, password: cred });
    // A password may hold '@', ',' and ':' (the last '@' ends it).
    expect(parseBrokersUrl('u/p@ss,w:rd@h:5')).toMatchObject({ user: 'u', password: 'p@ss,w:rd', endpoints: [{ host: 'h', port: 5 }] });
  });

  const refused: Array<[string, string, RegExp]> = [
    ['a 100,000-character host name', 'h'.repeat(100_000), /is 100000 characters long; at most/],
    ['a 254-character host name', `${longest}x`, /host name of 254 characters \(at most 253\)/],
    ['a label of 64', `${'a'.repeat(64)}.example`, /not a host name/],
    ['an empty label', 'a..b', /not a host name/],
    ['a label ending with -', 'a-.b', /not a host name/],
    ['a NUL in a host', 'h\u0000x', /not a host name/],
    ['a slash in a host', 'h/x:5672', /not a host name/],
    ['a # in a host', 'h#1', /not a host name/],
    ['no IPv6 between brackets', '[zz]:5672', /not an IPv6 address/],
    ['an empty zone', '[fe80::1%]', /not an IPv6 address/],
    ['too many brokers', Array.from({ length: MAX_ENDPOINTS + 1 }, (_, i) => `b${i}`).join(','), new RegExp(`lists ${MAX_ENDPOINTS + 1} brokers; at most ${MAX_ENDPOINTS}`)],
    ['an empty user', '@h', /user name before '@' is empty/],
    ['an empty user with a password', '/secret@h', /user name before '@' is empty/],
    ['an empty password', 'u/@h', /password after '\/' is empty/],
    ['a user of 256', `${'u'.repeat(256)}@h`, /user name of 256 characters \(at most 255\)/],
    ['a password of 256', `u/${'p'.repeat(256)}@h`, /password of 256 characters \(at most 255\)/],
    ['a control character in a user', 'u\nx@h', /holds a control character/],
    ['a NUL in a password', 'u/p\u0000w@h', /NUL character/],
    ['credentials and no broker', 'u/secret@', /lists no broker/],
    ['only a scheme', 'amqps://', /lists no broker/],
    ['nothing', '   ', /lists no broker/],
    ['two commas', 'a,,b', /an empty address/],
    ['a comma at the end', 'a,', /an empty address/],
    ['a colon and no port', 'h:', /cannot read 'h:'/],
    ['a port of six digits', 'h:000001', /cannot read/],
    ['port 0', 'h:0', /bad port in 'h:0'/],
    ['port 65536', 'h:65536', /bad port/],
    ['two ports', 'h:1:2', /cannot read/],
    ['a space in a host', 'a b', /cannot read/],
  ];
  for (const [what, url, why] of refused) {
    it(`refuses ${what}`, () => {
      let err: Error | undefined;
      try {
        parseBrokersUrl(url);
      } catch (e) {
        err = e as Error;
      }
      expect(err?.name, url.slice(0, 40)).toBe('ConfigError');
      expect(err!.message).toMatch(why);
      // Quoted at most in part; never the password.
      expect(err!.message.length).toBeLessThan(400);
      expect(err!.message).not.toContain('secret');
    });
  }

  it('a DR source with such a URL is refused as the client\'s error (every caller goes through parseBrokersUrl)', () => {
    expect(() => parseSource(`${'h'.repeat(300)}:5672`)).toThrow(/DR source .*host name of 300 characters/);
    expect(() => parseSource('dr/secret@')).toThrow(/lists no broker/);
    expect(() => parseSource('dr/secret@')).not.toThrow(/secret/);
  });
});
