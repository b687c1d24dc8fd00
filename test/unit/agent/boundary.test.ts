// agent - boundary: the Pacemaker helper (src/agent/) is its own room with one door.
// Pacemaker runs it at every action, failover included, so whatever it imports is
// loaded while a failover waits. Every module of the room imports only from inside
// the room, node's built-ins, or the door (src/agent/broker-facts.ts); the door only
// re-exports; and what the door reaches when it runs stays clear of the broker's
// runtime (queue engine, journal writer, AMQP server, replication, DR) and of the
// CLI. The imports are read from the sources, so no build is needed.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const top = resolve(import.meta.dirname, '..', '..', '..');
const src = join(top, 'src');
const room = join(src, 'agent');
const door = join(room, 'broker-facts.ts');

/** What the door must never reach at run time, each with the reason. Paths relative to src/. */
const forbidden: Array<{ test: (path: string) => boolean; what: string }> = [
  { test: (p) => /^broker\/queue[^/]*\.ts$/.test(p), what: 'the queue engine (src/broker/queue*)' },
  { test: (p) => /^store\/journal[^/]*\.ts$/.test(p), what: 'the journal writer (src/store/journal*)' },
  { test: (p) => p === 'amqp/server.ts', what: 'the AMQP server (src/amqp/server.ts)' },
  { test: (p) => p.startsWith('replication/'), what: 'HA replication (src/replication/)' },
  { test: (p) => p.startsWith('dr/') && !drConfigParsers.has(p), what: 'the DR runtime (src/dr/)' },
  { test: (p) => p.startsWith('cli/'), what: 'the CLI (src/cli/: commander and every command), which the fast path of bin/tandem skips' },
];

/**
 * The DR modules the door reaches, and why: loadSettings (src/ops/config.ts) reads
 * the `[dr]` lines of tandemd.conf with the DR line parser, which checks exchange
 * filters and remembers passwords. They parse text and read files; none of them
 * starts a bridge, dials a source or touches a queue. A new DR module reached is a
 * failure: either it is another parser (add it here, saying why) or the door
 * started to pull in the DR runtime.
 */
const drConfigParsers = new Set(['dr/config.ts', 'dr/credentials.ts', 'dr/topology.ts']);

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return filesUnder(path);
    return path.endsWith('.ts') ? [path] : [];
  });
}

/** The module specifiers a source imports or re-exports (static and literal dynamic ones). */
function specifiersIn(text: string): string[] {
  return ts.preProcessFile(text, true, true).importedFiles.map((f) => f.fileName);
}

/** Every import, type-only ones included: the room's rule is about what it knows of, not just what it loads. */
const allImports = (file: string): string[] => specifiersIn(readFileSync(file, 'utf8'));

/** The imports left once TypeScript erases those used only as types: what node loads. */
function runtimeImports(file: string): string[] {
  const js = ts.transpileModule(readFileSync(file, 'utf8'), {
    fileName: file,
    compilerOptions: { module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, target: ts.ScriptTarget.ES2022 },
  }).outputText;
  return specifiersIn(js);
}

/** A relative specifier as the source file it names (sources import './x.js' for './x.ts'); undefined for a package or built-in. */
function resolveSpecifier(from: string, spec: string): string | undefined {
  if (!spec.startsWith('.')) return undefined;
  const base = resolve(dirname(from), spec);
  const candidates = [base.replace(/\.js$/, '.ts'), base, `${base}.ts`, join(base, 'index.ts')];
  const found = candidates.find((c) => existsSync(c) && statSync(c).isFile());
  if (!found) throw new Error(`${relative(top, from)} imports ${spec}, which names no file`);
  return found;
}

const isBuiltin = (spec: string): boolean => spec.startsWith('node:');
const inRoom = (path: string): boolean => path.startsWith(room + '/');
const srcPath = (path: string): string => relative(src, path);

/** Every source file the door loads when it runs (itself included), with one path that reaches each. */
function reachedFromDoor(): Map<string, string[]> {
  const via = new Map<string, string[]>([[door, [srcPath(door)]]]);
  const queue = [door];
  while (queue.length > 0) {
    const file = queue.shift()!;
    for (const spec of runtimeImports(file)) {
      const target = resolveSpecifier(file, spec);
      if (target === undefined || via.has(target) || !target.endsWith('.ts')) continue;
      via.set(target, [...via.get(file)!, srcPath(target)]);
      queue.push(target);
    }
  }
  return via;
}

describe('agent - boundary', () => {
  const roomFiles = filesUnder(room);

  it('the room holds the helper, its entry and its door', () => {
    const names = roomFiles.map((f) => relative(room, f));
    expect(names).toContain('main.ts');
    expect(names).toContain('index.ts');
    expect(names).toContain('broker-facts.ts');
  });

  it('every module of src/agent/ imports only from the room, node built-ins, or the door', () => {
    const breaches: string[] = [];
    for (const file of roomFiles) {
      if (file === door) continue;
      for (const spec of allImports(file)) {
        if (isBuiltin(spec)) continue;
        const target = resolveSpecifier(file, spec);
        if (target === undefined) breaches.push(`${srcPath(file)} imports the package ${spec}: packages come through the door too, so the agent's load stays in view`);
        else if (!inRoom(target)) breaches.push(`${srcPath(file)} imports ${srcPath(target)}: re-export what it needs from agent/broker-facts.ts instead`);
      }
    }
    expect(breaches).toEqual([]);
  });

  it('the door only re-exports: it holds no logic of its own', () => {
    const text = readFileSync(door, 'utf8');
    const source = ts.createSourceFile(door, text, ts.ScriptTarget.ES2022, true);
    const other = source.statements
      .filter((s) => !(ts.isExportDeclaration(s) && s.moduleSpecifier !== undefined))
      .map((s) => s.getText(source).split('\n')[0]);
    expect(other).toEqual([]);
    // ...and only from outside the room: a door that opens onto the room is not a door.
    const inward = allImports(door).filter((spec) => inRoom(resolveSpecifier(door, spec) ?? ''));
    expect(inward).toEqual([]);
  });

  it("what the door loads stays clear of the broker's runtime and of the CLI", () => {
    const reached = reachedFromDoor();
    const breaches: string[] = [];
    for (const [file, path] of reached) {
      const hit = forbidden.find((f) => f.test(srcPath(file)));
      if (hit) breaches.push(`the door reaches ${hit.what}: ${path.join(' -> ')}`);
    }
    expect(breaches).toEqual([]);
    // The walk did walk: the door does reach the shared modules it names.
    expect([...reached.keys()].map(srcPath)).toEqual(expect.arrayContaining(['ops/config.ts', 'admin/client.ts', 'ha/promotion-guard.ts']));
  });

  it('the DR modules allowed to the door are the ones it still reaches', () => {
    // Keeps the exception honest: once loadSettings stops needing one, it leaves the list.
    const reachedDr = [...reachedFromDoor().keys()].map(srcPath).filter((p) => p.startsWith('dr/'));
    expect(reachedDr.sort()).toEqual([...drConfigParsers].sort());
  });
});
