// The OCF helper reads each broker's HA-STATUS answer into the promotion score: an
// epoch or LSN that is no whole number (a broker of another version, a damaged one)
// made NaN there, which no comparison ranks. Such an answer is an error, said as such.
import { describe, expect, it } from 'vitest';
import { readHaStatus } from '../../../src/agent/brokers.js';

describe('agent - HA-STATUS answers', () => {
  it('agent - an answer\'s epoch and LSN are whole numbers (absent: 0), or the answer is refused naming the field', () => {
    expect(readHaStatus({ state: 'ready', epoch: 3, lsn: 1200 })).toMatchObject({ state: 'ready', epoch: 3, lsn: 1200 });
    expect(readHaStatus({ state: 'catchup' })).toMatchObject({ state: 'catchup', epoch: 0, lsn: 0 });
    for (const [field, value] of [['epoch', 'abc'], ['lsn', 1.5], ['epoch', 1e300], ['lsn', -4], ['lsn', { n: 1 }]] as const) {
      expect(() => readHaStatus({ state: 'ready', epoch: 1, lsn: 1, [field]: value }), `${field}=${String(value)}`).toThrow(new RegExp(`HA-STATUS ${field} must be a whole number`));
    }
  });
});
