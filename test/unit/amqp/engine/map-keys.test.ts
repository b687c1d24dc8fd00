// AMQP maps from a peer become plain objects (fromAmqp). Their keys are the peer's:
// "__proto__" must be an own property, not the object's prototype, and a key that
// is itself a map with a "toString" key of its own must not throw from the decoder.
import { describe, expect, it } from 'vitest';
import { fromAmqp } from '../../../../src/amqp/engine/message.js';
import { amqp } from '../../../../src/amqp/engine/types.js';

describe('AMQP maps from a peer', () => {
  it('map keys - a "__proto__" key is an own property and leaves the prototype alone', () => {
    const decoded = fromAmqp(amqp.map([
      [amqp.string('__proto__'), amqp.map([[amqp.string('operation'), amqp.string('DELETE')]])],
      [amqp.string('type'), amqp.string('queue')],
    ])) as Record<string, unknown>;
    expect(Object.getPrototypeOf(decoded)).toBe(Object.prototype);
    expect(Object.keys(decoded)).toEqual(['__proto__', 'type']);
    expect(decoded.operation).toBeUndefined();
    expect(Object.getOwnPropertyDescriptor(decoded, '__proto__')?.value).toEqual({ operation: 'DELETE' });
  });

  it('map keys - a key that is a map with its own "toString" is named as an object, not a TypeError', () => {
    const decoded = fromAmqp(amqp.map([[amqp.map([[amqp.string('toString'), amqp.uint(1)]]), amqp.string('x')]])) as Record<string, unknown>;
    expect(decoded).toEqual({ '[object Object]': 'x' });
  });
});
