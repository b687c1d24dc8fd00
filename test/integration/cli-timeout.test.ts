// --timeout of the tandem CLI: a value no timer can wait is a usage error naming the
// option, not a broker reported as unreachable (which is what a script acts on).
import { describe, expect, it } from 'vitest';
import { tandem } from '../helpers/tandem-cli.js';

describe('cli timeout', () => {
  it('cli timeout - a bad --timeout is exit 2 naming it, for the commands and for tandem ha', async () => {
    for (const value of ['abc', '-1', '0', '1e10', ' ']) {
      const list = await tandem(['queue', 'list', '-b', '127.0.0.1:1', '--timeout', value]);
      expect(list.code, value).toBe(2);
      expect(list.stderr, value).toMatch(/--timeout must be a number of seconds/);
      expect(list.stderr, value).not.toMatch(/no answer|TimeoutOverflowWarning/);
      const ping = await tandem(['ha', 'ping', '-b', '127.0.0.1:1', '--timeout', value]);
      expect(ping.code, value).toBe(2);
      expect(ping.stderr, value).toMatch(/--timeout must be a number of seconds/);
    }
    // A good one still gets as far as the broker: nothing listens there.
    expect((await tandem(['queue', 'list', '-b', '127.0.0.1:1', '--timeout', '0.5'])).code).toBe(69);
    expect((await tandem(['ha', 'ping', '-b', '127.0.0.1:1', '--timeout', '0.5'])).code).toBe(7);
  }, 60_000);
});
