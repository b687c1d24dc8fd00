import { describe, expect, it } from 'vitest';
import { Deque } from '../../../src/util/deque.js';
import { prng } from '../../../src/util/prng.js';


function contents<T>(d: Deque<T>): T[] {
  const viaAt: T[] = [];
  for (let i = 0; i < d.length; i++) viaAt.push(d.at(i) as T);
  expect([...d]).toEqual(viaAt);
  return viaAt;
}

describe('Deque', () => {
  it('starts empty', () => {
    const d = new Deque<number>();
    expect(d.length).toBe(0);
    expect(d.shift()).toBeUndefined();
    expect(d.peek()).toBeUndefined();
    expect(d.at(0)).toBeUndefined();
    expect(d.at(-1)).toBeUndefined();
    expect(d.removeAt(0)).toBeUndefined();
    expect(d.lowerBound(5, (x) => x)).toBe(0);
  });

  it('push/shift is FIFO across growth and wrap-around', () => {
    const d = new Deque<number>(2);
    for (let i = 0; i < 5; i++) d.push(i);
    expect(d.shift()).toBe(0);
    expect(d.shift()).toBe(1);
    for (let i = 5; i < 40; i++) d.push(i);
    const out: number[] = [];
    while (d.length > 0) out.push(d.shift() as number);
    expect(out).toEqual(Array.from({ length: 38 }, (_, i) => i + 2));
  });

  it('unshift puts items at the front', () => {
    const d = new Deque<number>(1);
    for (let i = 0; i < 10; i++) d.unshift(i);
    expect(contents(d)).toEqual([9, 8, 7, 6, 5, 4, 3, 2, 1, 0]);
    expect(d.peek()).toBe(9);
  });

  it('works with any initial capacity, including 0', () => {
    for (const cap of [0, 1, 3]) {
      const d = new Deque<number>(cap);
      d.push(1);
      d.unshift(0);
      d.insertAt(1, 5);
      expect(contents(d)).toEqual([0, 5, 1]);
    }
  });

  it('clear empties it and it stays usable', () => {
    const d = new Deque<number>();
    for (let i = 0; i < 20; i++) d.push(i);
    d.clear();
    expect(d.length).toBe(0);
    d.push(7);
    expect(contents(d)).toEqual([7]);
  });

  it('lowerBound finds the first index whose key is >= key', () => {
    const d = new Deque<number>(4);
    // Force a wrapped layout.
    for (const x of [0, 0, 0]) d.push(x);
    d.shift();
    d.shift();
    d.shift();
    for (const x of [10, 20, 20, 30, 40]) d.push(x);
    const key = (x: number): number => x;
    expect(d.lowerBound(5, key)).toBe(0);
    expect(d.lowerBound(10, key)).toBe(0);
    expect(d.lowerBound(11, key)).toBe(1);
    expect(d.lowerBound(20, key)).toBe(1);
    expect(d.lowerBound(21, key)).toBe(3);
    expect(d.lowerBound(40, key)).toBe(4);
    expect(d.lowerBound(41, key)).toBe(5);
  });

  for (const seed of [1, 2, 3, 42, 1234]) {
    it(`matches an array model over random operations (seed ${seed})`, () => {
      const rand = prng(seed);
      const int = (n: number): number => Math.floor(rand() * n);
      const d = new Deque<number>(1 + int(8));
      const model: number[] = [];
      let next = 0;
      for (let step = 0; step < 5000; step++) {
        // Bias towards growth for the first half, shrinking for the second, so sizes vary widely.
        const growBias = step < 2500 ? 0.6 : 0.4;
        const r = rand();
        if (r < growBias) {
          const op = int(3);
          const v = next++;
          if (op === 0) {
            d.push(v);
            model.push(v);
          } else if (op === 1) {
            d.unshift(v);
            model.unshift(v);
          } else {
            const i = int(model.length + 3) - 1; // includes out-of-range ends
            d.insertAt(i, v);
            model.splice(Math.max(0, Math.min(i, model.length)), 0, v);
          }
        } else {
          const op = int(2);
          if (op === 0) {
            expect(d.shift()).toBe(model.shift());
          } else {
            const i = int(model.length + 2) - 1;
            const expected = i >= 0 && i < model.length ? model.splice(i, 1)[0] : undefined;
            expect(d.removeAt(i)).toBe(expected);
          }
        }
        expect(d.length).toBe(model.length);
        expect(d.peek()).toBe(model[0]);
        if (step % 97 === 0) expect(contents(d)).toEqual(model);
        else {
          const i = int(model.length + 1);
          expect(d.at(i)).toBe(model[i]);
        }
      }
      expect(contents(d)).toEqual(model);
    });
  }

  it('keeps a sorted deque sorted when inserting at lowerBound (random keys)', () => {
    const rand = prng(7);
    const d = new Deque<number>(2);
    const model: number[] = [];
    for (let step = 0; step < 3000; step++) {
      if (model.length > 0 && rand() < 0.35) {
        const i = Math.floor(rand() * model.length);
        const k = model[i];
        const at = d.lowerBound(k, (x) => x);
        expect(d.at(at)).toBe(k);
        d.removeAt(at);
        model.splice(model.indexOf(k), 1);
      } else {
        const k = Math.floor(rand() * 500);
        d.insertAt(d.lowerBound(k, (x) => x), k);
        model.push(k);
        model.sort((a, b) => a - b);
      }
      const k = Math.floor(rand() * 520) - 10;
      const expected = model.findIndex((x) => x >= k);
      expect(d.lowerBound(k, (x) => x)).toBe(expected < 0 ? model.length : expected);
    }
    expect(contents(d)).toEqual(model);
  });
});
