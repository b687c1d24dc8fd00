// What both qpid-jms tests need: whether Java and Maven are here (CI installs them;
// elsewhere the tests skip with this reason), the classpath Maven resolves offline
// (test/setup.sh fetched it), and the path of a single-file Java program.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '../helpers/broker.js';

const jmsDir = join(repoRoot, 'test', 'jms');

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

/** The qpid-jms classpath of test/jms/pom.xml, resolved offline into `dir`. */
export function jmsClasspath(dir: string): string {
  const cpFile = join(dir, 'classpath');
  execFileSync('mvn', ['-q', '-o', '-f', join(jmsDir, 'pom.xml'), 'dependency:build-classpath', `-Dmdep.outputFile=${cpFile}`], { stdio: 'inherit', timeout: 120_000 });
  return readFileSync(cpFile, 'utf8').trim();
}

/** A Java program of test/jms/src/main/java, run as a single source file. */
export const javaProgram = (name: string): string => join(jmsDir, 'src', 'main', 'java', `${name}.java`);
