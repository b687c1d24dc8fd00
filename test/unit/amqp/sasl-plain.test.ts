// SASL PLAIN's authzid (RFC 4616 section 2): tandem has no proxy authorisation, so a
// login asking to act as another user fails as a wrong password does, logged and
// counted by the throttle; asking to act as oneself is an ordinary login.
import { describe, expect, it } from 'vitest';
import type { UserDirectory } from '../../../src/admin/users.js';
import { FREE_FAILURES, LoginThrottle } from '../../../src/amqp/login-throttle.js';
import { plainVerifier } from '../../../src/amqp/sasl-plain.js';
import type { Logger } from '../../../src/ops/log.js';

function setup() {
  const warned: Array<{ fields: Record<string, unknown>; msg: string }> = [];
  const log = { warn: (fields: Record<string, unknown>, msg: string) => warned.push({ fields, msg }), error() {}, info() {}, debug() {} } as unknown as Logger;
  const checked: string[] = [];
  const users = {
    authenticate: async (name: string, password: string) => {
      checked.push(name);
      return password === `${name}-pw` ? 'user' : undefined;
    },
  } as unknown as UserDirectory;
  const throttle = new LoginThrottle(() => 0);
  const verify = plainVerifier({ users, throttle, log }, '::ffff:10.0.0.7');
  const signal = new AbortController().signal;
  return { warned, checked, throttle, login: (user: string, password: string, authzid: string) => verify(user, password, authzid, signal) };
}

describe('sasl plain - authzid', () => {
  it('another user: refused with the right password, logged with what it asked, the password never checked; empty or the authcid itself: an ordinary login', async () => {
    const { login, warned, checked } = setup();
    expect(await login('alice', 'alice-pw', 'bob')).toBeUndefined();
    expect(checked).toEqual([]);
    expect(warned).toHaveLength(1);
    expect(warned[0]!.fields).toMatchObject({ remote: '10.0.0.7', user: 'alice', asked: 'bob' });
    expect(warned[0]!.msg).toMatch(/^authentication failed: 'alice' asked to act as another user/);
    expect(JSON.stringify(warned)).not.toContain('alice-pw');

    expect(await login('alice', 'alice-pw', '')).toBe('alice');
    expect(await login('alice', 'alice-pw', 'alice')).toBe('alice');
    expect(await login('alice', 'wrong', 'alice')).toBeUndefined();
    expect(warned.map((w) => w.msg).slice(1)).toEqual(['authentication failed']);
  });

  it('another user: counted by the throttle as a failed login, for the address and the name', async () => {
    const { login, throttle } = setup();
    for (let i = 0; i < FREE_FAILURES; i++) expect(await login('alice', 'alice-pw', 'bob')).toBeUndefined();
    // The next attempt from that address, or as that user, would wait.
    expect(throttle.begin('10.0.0.7', 'carol')).toBeGreaterThan(0);
    expect(throttle.begin('10.0.0.8', 'alice')).toBeGreaterThan(0);
    expect(throttle.begin('10.0.0.8', 'dave')).toBe(0);
  });
});
