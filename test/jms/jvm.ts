// What the qpid-jms tests need: whether Java and Maven are here (CI installs them;
// elsewhere the tests skip with this reason), the classpath Maven resolves offline
// (test/setup.sh fetched it) with the classes the programs share, a describe block's
// temp dir and classpath, the path of a single-file Java program, and a program run
// that talks JSON lines.
import { type ChildProcessWithoutNullStreams, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { killAllBrokers, repoRoot } from '../helpers/broker.js';

const jmsDir = join(repoRoot, 'test', 'jms');
const javaDir = join(jmsDir, 'src', 'main', 'java');
/** The classes of src/main/java that programs use (Json.java, FailoverLink.java): no programs themselves. */
const sharedClasses = ['Json', 'FailoverLink'];

function found(cmd: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

export const haveJava = found('java') && found('mvn');
if (!haveJava) console.warn('test/jms skipped: java or mvn is not installed (test/setup.sh installs default-jdk-headless and maven)');

/** A Java program of test/jms/src/main/java, run as a single source file (or, for a shared class, compiled ahead). */
export const javaProgram = (name: string): string => join(javaDir, `${name}.java`);

/**
 * The qpid-jms classpath of test/jms/pom.xml, resolved offline into `dir`, and the shared
 * classes compiled into `dir` after it. Java 17's single-file launcher compiles only the
 * program's own file; the others it finds compiled on the classpath.
 */
export function jmsClasspath(dir: string): string {
  const cpFile = join(dir, 'classpath');
  execFileSync('mvn', ['-q', '-o', '-f', join(jmsDir, 'pom.xml'), 'dependency:build-classpath', `-Dmdep.outputFile=${cpFile}`], { stdio: 'inherit', timeout: 120_000 });
  const dependencies = readFileSync(cpFile, 'utf8').trim();
  const classes = join(dir, 'classes');
  execFileSync('javac', ['-d', classes, '-cp', dependencies, ...sharedClasses.map(javaProgram)], { stdio: 'inherit', timeout: 120_000 });
  return `${dependencies}${delimiter}${classes}`;
}

/**
 * Call inside a describe block: a temp dir (named `tmpPrefix`...) with the classpath
 * before all its tests; every broker killed and the dir removed after them.
 * Returns the classpath's getter.
 */
export function jmsSuite(tmpPrefix: string): () => string {
  const dir = mkdtempSync(join(tmpdir(), tmpPrefix));
  let classpath = '';

  beforeAll(() => {
    classpath = jmsClasspath(dir);
  }, 150_000);

  afterAll(async () => {
    await killAllBrokers();
    rmSync(dir, { recursive: true, force: true });
  });

  return () => classpath;
}

/** A Java program under way: its process, its exit, the tail of its stderr. */
export interface JavaRun {
  java: ChildProcessWithoutNullStreams;
  exited: Promise<number | null>;
  /** The last 20,000 characters it wrote to stderr. */
  stderr(): string;
  /** Cancel the kill timer and kill it (nothing once it has exited). */
  stop(): void;
}

/**
 * Run a Java program of test/jms/src/main/java that writes one JSON object a line on
 * stdout, handing each line to `onLine`; it is killed after `killAfterMs` whatever happens.
 */
export function runJsonLines<Line>(classpath: string, program: string, args: string[], killAfterMs: number, onLine: (line: Line) => void): JavaRun {
  const java = spawn('java', ['-cp', classpath, javaProgram(program), ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
  const killJava = setTimeout(() => java.kill('SIGKILL'), killAfterMs);
  let stderr = '';
  let buf = '';
  java.stderr.on('data', (d) => (stderr = (stderr + d).slice(-20_000)));
  java.stdout.on('data', (d) => {
    buf += d;
    for (let i; (i = buf.indexOf('\n')) >= 0; buf = buf.slice(i + 1)) onLine(JSON.parse(buf.slice(0, i)) as Line);
  });
  const exited = new Promise<number | null>((r) => java.once('exit', (code) => r(code)));
  return {
    java,
    exited,
    stderr: () => stderr,
    stop: () => {
      clearTimeout(killJava);
      java.kill('SIGKILL');
    },
  };
}
