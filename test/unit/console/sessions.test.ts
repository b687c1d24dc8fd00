// src/console/sessions.ts: how many sessions are kept, and whose go first.
import { describe, expect, it } from 'vitest';
import { MAX_SESSIONS_PER_USER, SessionStore } from '../../../src/console/sessions.js';

describe('console sessions', () => {
  it('console sessions - one user logging in again and again pushes out only their own oldest sessions', () => {
    let now = 0;
    const store = new SessionStore(() => now);
    const admin = store.create('alice');
    // A reader (or a script with a reader's password) logs in far more often than anyone could need.
    const reader = Array.from({ length: 2000 }, () => {
      now += 1;
      return store.create('bob');
    });
    expect(store.get(admin.id)?.user).toBe('alice');
    expect(store.size).toBe(1 + MAX_SESSIONS_PER_USER);
    // Their newest stay, the least recently used went.
    expect(store.get(reader.at(-1)!.id)?.user).toBe('bob');
    expect(store.get(reader.at(-MAX_SESSIONS_PER_USER)!.id)?.user).toBe('bob');
    expect(store.get(reader.at(-MAX_SESSIONS_PER_USER - 1)!.id)).toBeUndefined();
  });

  it('console sessions - a used session of a user outlives their unused ones', () => {
    let now = 0;
    const store = new SessionStore(() => now);
    const kept = store.create('bob');
    for (let i = 0; i < MAX_SESSIONS_PER_USER + 5; i++) {
      now += 1;
      expect(store.get(kept.id)).toBeDefined();
      store.create('bob');
    }
    expect(store.get(kept.id)?.user).toBe('bob');
  });

  it('console sessions - many users together are still bounded', () => {
    const store = new SessionStore();
    for (let i = 0; i < 3000; i++) store.create(`user${i}`);
    expect(store.size).toBe(1000);
  });
});
