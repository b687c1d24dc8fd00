// Named subscriptions: which queue each JMS subscription asks for, and the rule that
// a durable subscription that is not shared and a shared one may not both have one
// name and clientID (they name one queue; the queue records the kind that made it).
import { describe, expect, it } from 'vitest';
import { kindConflict, kindOf, subscriptionName, subscriptionOf } from '../../../src/amqp/subscriptions.js';

const durable = { durable: 2, expiry_policy: 'never' };
const unshared = subscriptionOf(durable, 's1', 'client-a')!;
const shared = subscriptionOf({ ...durable, capabilities: ['topic', 'shared'] }, 's1', 'client-a')!;

describe('subscriptions - kinds of one name', () => {
  it('an unshared and a shared durable subscription of one name and clientID name the same queue', () => {
    expect(unshared).toEqual({ queue: 'sub:client-a:s1', durable: true, shared: false, global: false });
    expect(shared).toEqual({ queue: 'sub:client-a:s1', durable: true, shared: true, global: false });
    expect([kindOf(unshared), kindOf(shared)]).toEqual(['unshared', 'shared']);
  });

  it('a queue made as one kind refuses the other, naming the subscription and the kind that exists', () => {
    expect(kindConflict(shared, 'unshared')).toBe(
      "a durable subscription that is not shared named 's1' already exists for clientID 'client-a', so a shared one cannot have that name; unsubscribe it first, or pick another name",
    );
    expect(kindConflict(unshared, 'shared')).toBe(
      "a shared durable subscription named 's1' already exists for clientID 'client-a', so one that is not shared cannot have that name; unsubscribe it first, or pick another name",
    );
  });

  it('a queue made as the same kind is taken', () => {
    expect(kindConflict(unshared, 'unshared')).toBeUndefined();
    expect(kindConflict(shared, 'shared')).toBeUndefined();
  });

  it('a queue made before kinds were recorded takes either kind', () => {
    expect(kindConflict(unshared, undefined)).toBeUndefined();
    expect(kindConflict(shared, undefined)).toBeUndefined();
  });

  it('the links of a shared subscription (name|2, name|global) are one subscription', () => {
    const second = subscriptionOf({ ...durable, capabilities: ['shared'] }, 's1|2', 'client-a')!;
    expect(second.queue).toBe(shared.queue);
    const global = subscriptionOf({ ...durable, capabilities: ['shared', 'global'] }, 's1|global', 'client-a')!;
    expect(global.queue).toBe('sub::s1');
    expect(subscriptionName(global.queue)).toEqual(['s1', 'no clientID (global)']);
  });

  it('names are decoded for the description, as the client spelled them', () => {
    const odd = subscriptionOf(durable, 'a.b/c d', 'app:1')!;
    expect(odd.queue).toBe('sub:app%3A1:a%2Eb%2Fc%20d');
    expect(subscriptionName(odd.queue)).toEqual(['a.b/c d', "clientID 'app:1'"]);
    // A name that is no encoding (a queue an operator named so) is shown as it is, not an error.
    expect(subscriptionName('sub:%E0%A4:%zz')).toEqual(['%zz', "clientID '%E0%A4'"]);
  });
});
