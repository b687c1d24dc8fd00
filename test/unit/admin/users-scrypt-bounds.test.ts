// Scrypt parameters in the users file are bounded by the memory they ask for
// (128 * N * r bytes): N and r each within range could still ask 4 GiB per login.
import { describe, expect, it } from 'vitest';
import type { ScryptFn } from '../../../src/admin/password-hasher.js';
import { verifyPassword } from '../../../src/admin/users.js';

describe('users file - scrypt parameters', () => {
  it('users - a line asking scrypt for more than 256 MiB is no match, without hashing; the default parameters are hashed', async () => {
    const asked: Array<{ N: number; r: number }> = [];
    const scrypt: ScryptFn = async (_password, _salt, keylen, params) => {
      asked.push({ N: params.N, r: params.r });
      return Buffer.alloc(keylen);
    };
    const salt = Buffer.alloc(16).toString('base64');
    const key = Buffer.alloc(32).toString('base64');
    expect(await verifyPassword('pw', `scrypt$${2 ** 20}$32$1$${salt}$${key}`, scrypt)).toBe(false);
    expect(await verifyPassword('pw', `scrypt$${2 ** 20}$8$1$${salt}$${key}`, scrypt)).toBe(false);
    expect(asked).toEqual([]);
    // 16 MiB ('tandem user add') and 256 MiB exactly are hashed.
    expect(await verifyPassword('pw', `scrypt$16384$8$1$${salt}$${key}`, scrypt)).toBe(true);
    expect(await verifyPassword('pw', `scrypt$${2 ** 18}$8$1$${salt}$${key}`, scrypt)).toBe(true);
    expect(asked).toEqual([{ N: 16384, r: 8 }, { N: 2 ** 18, r: 8 }]);
  });
});
