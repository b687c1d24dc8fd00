import { describe, expect, it } from 'vitest';
import { CHUNK, IdTable, spareChunks } from '../../../src/util/id-table.js';
import { prng } from '../../../src/util/prng.js';

interface Row {
  id: number;
  a: number;
  b: number;
  obj: string | undefined;
}

/** Every row through positions(), next() and the accessors, checked against each other. */
function rows(t: IdTable<string>): Row[] {
  const out: Row[] = [];
  for (const pos of t.positions()) out.push({ id: t.id(pos), a: t.get(pos, 0), b: t.get(pos, 1), obj: t.obj(pos) });
  const viaNext: number[] = [];
  for (let p = t.first(); p >= 0; p = t.next(p)) viaNext.push(t.id(p));
  expect(viaNext).toEqual(out.map((r) => r.id));
  expect(t.length).toBe(out.length);
  if (out.length > 0) expect(t.id(t.last())).toBe(out.at(-1)!.id);
  return out;
}

describe('IdTable', () => {
  it('IdTable - appends in order, finds by id, removes at the front and the back', () => {
    const t = new IdTable<string>(['f64', 'u32']);
    for (let id = 1; id <= 3 * CHUNK; id++) {
      const p = t.insert(id);
      t.set(p, 0, id * 1.5);
      t.set(p, 1, id % 7);
    }
    expect(t.length).toBe(3 * CHUNK);
    expect(t.get(t.find(1000), 0)).toBe(1500);
    expect(t.find(0)).toBe(-1);
    expect(t.find(3 * CHUNK + 1)).toBe(-1);
    expect(t.id(t.lowerBound(0))).toBe(1);
    expect(t.lowerBound(3 * CHUNK + 1)).toBe(-1);
    // Consume from the front, as a queue does.
    let p = t.first();
    for (let k = 0; k < CHUNK + 10; k++) p = t.removeAt(p);
    expect(t.id(p)).toBe(CHUNK + 11);
    expect(t.id(t.first())).toBe(CHUNK + 11);
    t.removeAt(t.last());
    expect(t.id(t.last())).toBe(3 * CHUNK - 1);
    expect(rows(t).length).toBe(2 * CHUNK - 11);
  });

  it('IdTable - random inserts, removals and objects match a sorted model; frozen snapshots never change', () => {
    for (const seed of [1, 2, 3, 4]) {
      const rnd = prng(seed);
      const t = new IdTable<string>(['u32', 'u8']);
      let model: Row[] = [];
      const snapshots: Array<{ chunks: ReturnType<IdTable<string>['freeze']>; expect: Row[] }> = [];
      const ids = new Set<number>();
      for (let step = 0; step < 12_000; step++) {
        const op = rnd();
        if (op < 0.5 || model.length === 0) {
          // Mostly ascending ids, sometimes anywhere.
          let id = rnd() < 0.7 ? (model.at(-1)?.id ?? 0) + 1 + Math.floor(rnd() * 3) : Math.floor(rnd() * 50_000);
          while (ids.has(id)) id++;
          ids.add(id);
          const p = t.insert(id);
          const row: Row = { id, a: Math.floor(rnd() * 1e9), b: Math.floor(rnd() * 256), obj: rnd() < 0.2 ? `o${id}` : undefined };
          t.set(p, 0, row.a);
          t.set(p, 1, row.b);
          t.setObj(p, row.obj);
          let at = model.length;
          while (at > 0 && model[at - 1]!.id > id) at--;
          model.splice(at, 0, row);
        } else if (op < 0.85) {
          // Remove: often the front (a consumer), else anywhere.
          const k = rnd() < 0.5 ? 0 : Math.floor(rnd() * model.length);
          const p = t.find(model[k]!.id);
          expect(p).toBeGreaterThanOrEqual(0);
          const next = t.removeAt(p);
          ids.delete(model[k]!.id);
          model.splice(k, 1);
          if (k < model.length) expect(t.id(next)).toBe(model[k]!.id);
          else expect(next).toBe(-1);
        } else if (op < 0.95) {
          const k = Math.floor(rnd() * model.length);
          const p = t.find(model[k]!.id);
          const obj = rnd() < 0.5 ? undefined : `x${step}`;
          t.setObj(p, obj);
          model[k]!.obj = obj;
          t.set(p, 0, step);
          model[k]!.a = step;
        } else if (op < 0.97) {
          snapshots.push({ chunks: t.freeze(), expect: model.map((r) => ({ ...r })) });
        } else if (snapshots.length > 0) {
          const s = snapshots.shift()!;
          const copy = new IdTable<string>(['u32', 'u8']);
          // A snapshot's chunks read as the table was when it was taken.
          const seen: Row[] = [];
          for (const ch of s.chunks) {
            for (let i = ch.start; i < ch.end; i++) seen.push({ id: ch.ids[i]!, a: ch.cols[0]![i]!, b: ch.cols[1]![i]!, obj: ch.objs?.[i] });
          }
          expect(JSON.stringify(seen)).toBe(JSON.stringify(s.expect));
          copy.adopt(s.chunks.map((ch) => ch));
          expect(copy.length).toBe(s.expect.length);
          t.thaw(s.chunks);
        }
        if (step % 1000 === 0) expect(JSON.stringify(rows(t))).toBe(JSON.stringify(model));
      }
      expect(rows(t)).toEqual(model);
      // Sparse tables merge their chunks: storage stays proportional to the rows.
      let p = t.first();
      while (p >= 0) p = t.length > 100 && t.id(p) % 10 !== 0 ? t.removeAt(p) : t.next(p);
      expect(t.storageBytes / t.length).toBeLessThan(((8 + 4 + 1) * CHUNK * 8) / CHUNK);
    }
  });

  it('IdTable - appendRows copies runs of rows in bulk, across chunks, after what is there', () => {
    const t = new IdTable<string>(['u32', 'u8']);
    const p = t.insert(1);
    t.set(p, 0, 7);
    const n = 2 * CHUNK + 100;
    const ids = Float64Array.from({ length: n }, (_, i) => 10 + i * 2);
    t.appendRows(ids, [Uint32Array.from(ids, (x) => x * 3), Uint8Array.from(ids, (x) => x % 256)]);
    const r = rows(t);
    expect(r.length).toBe(n + 1);
    expect(r[0]).toEqual({ id: 1, a: 7, b: 0, obj: undefined });
    for (let i = 0; i < n; i++) expect(r[i + 1]).toEqual({ id: 10 + i * 2, a: (10 + i * 2) * 3, b: (10 + i * 2) % 256, obj: undefined });
    expect(t.get(t.find(10 + 2 * 500), 0)).toBe((10 + 2 * 500) * 3);
    expect(() => t.appendRows(Float64Array.of(5), [Uint32Array.of(0), Uint8Array.of(0)])).toThrow(RangeError);
  });

  it('IdTable - a chunk a table empties serves the next table of its columns, with nothing of its old rows showing', () => {
    // A column list of its own, so no other test's spares are in play.
    const columns = ['f64', 'u16'] as const;
    const a = new IdTable<string>(columns);
    const b = new IdTable<string>(columns);
    for (let id = 1; id <= 3; id++) {
      const p = a.insert(id);
      a.set(p, 0, id * 10);
      a.set(p, 1, id);
      a.setObj(p, `a${id}`);
    }
    while (a.length > 0) a.removeAt(a.first());
    expect(spareChunks(columns)).toBe(1);
    // b takes a's chunk: its row starts zeroed and without an object.
    expect(rows(b)).toEqual([]);
    const p = b.insert(2);
    expect(spareChunks(columns)).toBe(0);
    expect({ a: b.get(p, 0), b: b.get(p, 1), obj: b.obj(p) }).toEqual({ a: 0, b: 0, obj: undefined });
    // A queue whose consumer keeps up: empty, one row, empty again, on two tables in turn.
    const model: Record<'a' | 'b', Row[]> = { a: [], b: [{ id: 2, a: 0, b: 0, obj: undefined }] };
    for (let id = 10; id < 2000; id++) {
      const [t, m] = id % 2 ? ([a, model.a] as const) : ([b, model.b] as const);
      const q = t.insert(id);
      t.set(q, 0, id + 0.5);
      if (id % 3 === 0) t.setObj(q, `o${id}`);
      m.push({ id, a: id + 0.5, b: 0, obj: id % 3 === 0 ? `o${id}` : undefined });
      if (m.length > 1 + (id % 4)) {
        t.removeAt(t.first());
        m.shift();
      }
      expect(rows(a)).toEqual(model.a);
      expect(rows(b)).toEqual(model.b);
      expect(spareChunks(columns)).toBeLessThanOrEqual(8);
    }
  });

  it('IdTable - a chunk a snapshot holds is not reused when its table empties it, and spares are bounded', () => {
    const columns = ['u32', 'u16'] as const;
    const t = new IdTable<string>(columns);
    for (let id = 1; id <= 5; id++) t.set(t.insert(id), 0, id * 7);
    const snapshot = t.freeze();
    while (t.length > 0) t.removeAt(t.first());
    // The table emptied a copy (copy-on-write); the snapshot's chunk stays as it was.
    const other = new IdTable<string>(columns);
    for (let id = 100; id <= 105; id++) other.set(other.insert(id), 0, 1);
    const seen = snapshot.flatMap((ch) => Array.from({ length: ch.end - ch.start }, (_, i) => [ch.ids[ch.start + i], ch.cols[0]![ch.start + i]]));
    expect(seen).toEqual([1, 2, 3, 4, 5].map((id) => [id, id * 7]));
    t.thaw(snapshot);
    // Many tables emptied at once keep at most eight spares between them.
    const many = Array.from({ length: 20 }, () => new IdTable<string>(columns));
    many.forEach((m, i) => m.insert(i + 1));
    for (const m of many) m.removeAt(m.first());
    expect(spareChunks(columns)).toBe(8);
  });
});
