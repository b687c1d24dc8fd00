// Run the tandem admin CLI (bin/tandem, built dist/) against a test broker and
// collect its exit code and output; management calls for test setup.
import { execFile } from 'node:child_process';
import { ManagementClient } from '../../src/admin/client.js';
import { tandemBin } from './broker.js';

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export function tandem(args: string[], options: { input?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): Promise<CliResult> {
  return new Promise((resolve) => {
    const child = execFile(
      process.execPath,
      [tandemBin, ...args],
      { env: { ...process.env, ...options.env }, timeout: options.timeoutMs ?? 30_000 },
      (err, stdout, stderr) => {
        const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? ((err as { code: number }).code) : 1) : 0;
        resolve({ code, stdout: String(stdout), stderr: String(stderr) });
      },
    );
    if (options.input !== undefined) child.stdin!.end(options.input);
    else child.stdin!.end();
  });
}

/** Run one management request over AMQP (faster than spawning the CLI, for setup). */
export async function manage(port: number, operation: string, type: string | undefined, name: string | undefined, body: Record<string, unknown> = {}, auth?: { user: string; password: string }): Promise<unknown> {
  const client = await ManagementClient.connect({ host: '127.0.0.1', port, user: auth?.user, password: auth?.password }, { timeoutMs: 10_000 });
  try {
    return await client.request(operation, type, name, body);
  } finally {
    client.close();
  }
}

/** A queue's depth, asked over AMQP management. */
export async function queueDepth(port: number, queue: string): Promise<number> {
  return ((await manage(port, 'READ', 'queue', queue)) as { depth: number }).depth;
}

/** Queue `name` (durable) whose alternate exchange is `name`.x, a fanout to the durable queue `name`.dlq. */
export async function declareWithDeadLetters(port: number, name: string): Promise<void> {
  await manage(port, 'CREATE', 'exchange', `${name}.x`, { 'exchange-type': 'fanout', durable: true });
  await manage(port, 'CREATE', 'queue', `${name}.dlq`, { durable: true });
  await manage(port, 'CREATE', 'binding', undefined, { exchange: `${name}.x`, queue: `${name}.dlq` });
  await manage(port, 'CREATE', 'queue', name, { durable: true, 'alternate-exchange': `${name}.x` });
}
