// What `tandem queue show` and `tandem broker status` print (src/cli/common.ts
// attributes): one attribute a line, names padded to the longest (a fixed 16 or 20
// cut the column at longer names), values escaped as table cells are, so an answer
// cannot drive the terminal or forge a line.
import { describe, expect, it } from 'vitest';
import { attributes } from '../../../src/cli/common.js';

describe('cli output - attributes', () => {
  it('pads every name to the longest, whatever its length', () => {
    const text = attributes({ name: 'broker', 'memory-limit-bytes': 10, epoch: 0 });
    expect(text.split('\n')).toEqual(['name                broker', 'memory-limit-bytes  10', 'epoch               0']);
  });

  it('escapes control characters in names and values, and shows objects as JSON', () => {
    const text = attributes({ 'alternate-exchange': 'x\u001b[2J\nforged  1', nested: { a: [1, 'b'] }, none: null, empty: '' });
    const lines = text.split('\n');
    expect(lines).toHaveLength(4);
    expect(lines[0]).toBe('alternate-exchange  x\\x1b[2J\\x0aforged  1');
    expect(lines[1]).toBe('nested              {"a":[1,"b"]}');
    expect(lines[2]).toBe('none                null');
    expect(lines[3]).toBe('empty');
  });
});
