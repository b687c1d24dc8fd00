// checkMessage: only a sequence of the spec's message sections (3.2) passes.
import { describe, expect, it } from 'vitest';
import { encode } from '../../../../src/amqp/engine/encoder.js';
import { AmqpError } from '../../../../src/amqp/engine/errors.js';
import { MESSAGE_SECTIONS, checkMessage } from '../../../../src/amqp/engine/message-sections.js';
import { amqp } from '../../../../src/amqp/engine/types.js';

const section = (d: ReturnType<typeof amqp.ulong> | ReturnType<typeof amqp.symbol>) => encode(amqp.described(d, amqp.string('x')));

describe('message sections', () => {
  it('message sections - every section of the spec passes, by code and by symbol', () => {
    checkMessage(Buffer.concat(MESSAGE_SECTIONS.map((s) => section(amqp.ulong(s.code)))));
    checkMessage(Buffer.concat(MESSAGE_SECTIONS.map((s) => section(amqp.symbol(s.symbol)))));
    checkMessage(Buffer.alloc(0));
  });

  it('message sections - an unknown descriptor, a bare value and a hostile array are decode-errors', () => {
    for (const bad of [section(amqp.symbol('\n{"level":60,"msg":"forged"}\n')), section(amqp.ulong(0x79)), encode(amqp.string('bare')), Buffer.from('005377f000000005ffffffff98', 'hex')]) {
      let err: unknown;
      try {
        checkMessage(bad);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(AmqpError);
      expect((err as AmqpError).condition).toBe('amqp:decode-error');
      expect((err as AmqpError).description).not.toMatch(/forged/);
    }
  });
});
