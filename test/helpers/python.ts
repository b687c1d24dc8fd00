// Run a python qpid-proton script from test/interop/py with Debian's python3
// (the interpreter that has the proton package), returning its last JSON line.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { repoRoot } from './broker.js';

export const debianPython = '/usr/bin/python3';

export function runPython<T = unknown>(script: string, args: string[], timeoutMs = 30_000): Promise<T> {
  return new Promise((resolve, reject) => {
    // A script may print a message's annotations (up to 64 KiB each): more than execFile's 1 MiB default.
    execFile(debianPython, [join(repoRoot, 'test', 'interop', 'py', script), ...args], { timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`${script} failed: ${err.message}\n${stderr}`));
      const lines = stdout.trim().split('\n');
      try {
        resolve(JSON.parse(lines[lines.length - 1]) as T);
      } catch {
        reject(new Error(`${script} printed no JSON: ${stdout}\n${stderr}`));
      }
    });
  });
}
