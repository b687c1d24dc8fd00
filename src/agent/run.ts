// Running Pacemaker's tools (and getent) from the agent. node:child_process and
// not execa: every OCF action starts a fresh Node.js, and loading execa's ~140
// modules took longer (70-90 ms) than the tools the agent runs with it; failover
// time is paid in those starts (docs/pacemaker.md, "Measured failover").
import { execFile } from 'node:child_process';

export interface RunResult {
  exitCode: number;
  stdout: string;
  stderr: string;
}

/** Thrown when a command cannot be run at all (missing, killed by the timeout). */
export class RunError extends Error {
  constructor(
    readonly command: string,
    message: string,
  ) {
    super(`${command}: ${message}`);
    this.name = 'RunError';
  }
}

/**
 * The tools' environment: ours without the OCF_* variables Pacemaker gave the agent.
 * Pacemaker's tools read some of them: with OCF_RESKEY_CRM_meta_on_node set,
 * `attrd_updater --query --all` answers for that node only (Pacemaker 2.1.5), and the
 * positions the other nodes published in pre-promote were invisible.
 */
function toolEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { LC_ALL: 'C' };
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('OCF_') && k !== 'LC_ALL') env[k] = v;
  return env;
}

/**
 * Run a command to completion with LC_ALL=C; a non-zero exit is a result, not an
 * error. Rejects with RunError if it cannot be started or outlives timeoutMs.
 */
export function runCommand(command: string, args: readonly string[], timeoutMs = 10_000): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    execFile(
      command,
      args,
      { timeout: timeoutMs, killSignal: 'SIGKILL', maxBuffer: 16 * 1024 * 1024, env: toolEnv(), encoding: 'utf8' },
      (err, stdout, stderr) => {
        if (err) {
          const e = err as Omit<NodeJS.ErrnoException, 'code'> & { code?: number | string | null; killed?: boolean; signal?: string | null };
          if (typeof e.code === 'number') return resolve({ exitCode: e.code, stdout, stderr });
          if (e.killed) return reject(new RunError(command, `no answer within ${timeoutMs} ms`));
          if (e.signal) return reject(new RunError(command, `killed by ${e.signal}`));
          return reject(new RunError(command, e.code === 'ENOENT' ? 'not installed' : e.message));
        }
        resolve({ exitCode: 0, stdout, stderr });
      },
    );
  });
}
