// A DR source's canonical spelling (parseSource, what the journal keeps and bridges are
// keyed by) must read back as the same brokers: an IPv6 address keeps its brackets, as
// hostPort (src/util/host-port.ts) writes it everywhere else.
import { describe, expect, it } from 'vitest';
import { displaySource, normaliseSource, parseSource, sourceWithPassword } from '../../../src/dr/config.js';

describe('DR source URL', () => {
  it('an IPv6 source is written with its brackets and reads back as the same brokers', () => {
    const cases: Array<[string, string]> = [
      ['amqp://[::1]:5672', '[::1]:5672'],
      ['[::1]', '[::1]:5672'],
      ['amqps:dr/secret@[fe80::1%lo]:5671,[2001:db8::7]', 'amqps:dr@[fe80::1%lo]:5671,[2001:db8::7]:5671'],
      ['dr@127.0.0.1:5673,[::1]:5674,host.example', 'dr@127.0.0.1:5673,[::1]:5674,host.example:5672'],
    ];
    for (const [given, canonical] of cases) {
      const { source } = parseSource(given);
      expect(source, given).toBe(canonical);
      // The journal's spelling is parsed again at every start: it must be a fixed point.
      expect(parseSource(source).source, source).toBe(canonical);
    }
    expect(displaySource('amqps:dr@[fe80::1%lo]:5671,[2001:db8::7]:5671')).toBe('amqps:[fe80::1%lo]:5671,[2001:db8::7]:5671');
    expect(displaySource('[::1]:5672')).toBe('[::1]:5672');
  });

  it('the password goes back in before the IPv6 host, and the URL reads back whole', () => {
    const source = normaliseSource('dr/pw-v6@[::1]:5699');
    expect(source).toBe('dr@[::1]:5699');
    const withPassword = sourceWithPassword(source);
    expect(withPassword).toBe('dr/pw-v6@[::1]:5699');
    expect(parseSource(withPassword)).toEqual({ source, password: 'pw-v6' });
  });
});
