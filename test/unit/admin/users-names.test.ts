// User names: the name SASL ANONYMOUS gives its clients is not a user's. A user of
// that name logged in with a password but got no role (the server took the name for
// an anonymous login), and ACL rules written for that user applied to every
// anonymous client.
import { describe, expect, it } from 'vitest';
import { ANONYMOUS_IDENTITY, parseServedUsers, parseUsers, validateUserName } from '../../../src/admin/users.js';

const HASH = 'scrypt$16384$8$1$c2FsdA==$a2V5';

describe('users file - names', () => {
  it('users - tandem user add refuses the reserved name, and accepts others of the same letters', () => {
    expect(() => validateUserName(ANONYMOUS_IDENTITY)).toThrow(/reserved/);
    expect(() => validateUserName('Anonymous')).not.toThrow();
    expect(() => validateUserName('anonymous1')).not.toThrow();
  });

  it('users - the broker refuses a file naming the reserved user, saying how to mend it; the CLI still reads it (so it can delete the user)', () => {
    const text = `alice:user:${HASH}\nanonymous:admin:${HASH}\n`;
    expect(() => parseServedUsers(text, '/etc/tandem/users')).toThrow(/\/etc\/tandem\/users: the user name 'anonymous' is reserved.*tandem user del anonymous/);
    expect([...parseUsers(text, '/etc/tandem/users').keys()]).toEqual(['alice', 'anonymous']);
    expect([...parseServedUsers(`alice:user:${HASH}\n`, 'f').keys()]).toEqual(['alice']);
  });
});
