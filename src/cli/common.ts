// What every tandem subcommand shares: the -b broker option, one management
// connection per run, output as text or --json, and stable exit codes.
import type { Command } from 'commander';
import { printable } from '../ops/printable.js';
import { redact } from '../ops/secrets.js';
import { ConnectError, ManagementClient } from '../admin/client.js';
import { addTlsOptions, brokerAddressHelp, brokerAddressOf, timeoutMsOf, type TlsFileOptions } from './broker-address.js';
import { ErrorCatalogue, TandemError } from '../broker/errors.js';
import { exitWhenFlushed } from '../util/exit.js';

/**
 * Exit codes scripts can rely on (documented in the README): an error's own is in the
 * error catalogue; these are the ones no broker error has.
 */
export const Exit = {
  ok: 0,
  /** Anything unexpected, as the catalogue's internal error. */
  error: ErrorCatalogue.TANDEM_ERR_INTERNAL.exitCode,
  /** Bad arguments on the command line, as the catalogue's invalid argument. */
  usage: ErrorCatalogue.TANDEM_ERR_INVALID_ARGUMENT.exitCode,
  /** sysexits' EX_UNAVAILABLE: no broker answered at the address. */
  unreachable: 69,
} as const;

export interface BrokerOption extends TlsFileOptions {
  broker: string;
  json?: boolean;
  timeout?: string;
}

export function addBrokerOption(cmd: Command): Command {
  return addTlsOptions(cmd.option('-b, --broker <address>', brokerAddressHelp, process.env.TANDEM_BROKER ?? 'localhost:5672'))
    .option('--json', 'print JSON for scripts')
    .option('--timeout <seconds>', 'give up after this long', '10');
}

/** Open a management connection, run fn, close; errors become messages and exit codes. */
export async function withBroker<T>(opts: BrokerOption, fn: (client: ManagementClient) => Promise<T>): Promise<T> {
  const address = brokerAddressOf(opts.broker, opts);
  const timeoutMs = timeoutMsOf(opts.timeout, 10);
  // Ask for admin access: HA backups admit admin connections only when they ask.
  const client = await ManagementClient.connect(address, { timeoutMs, properties: { 'qpid.ha-admin': true } });
  try {
    return await fn(client);
  } finally {
    client.close();
  }
}

export function exitCodeOf(err: unknown): number {
  if (err instanceof ConnectError) return Exit.unreachable;
  if (err instanceof TandemError) return err.exitCode;
  return Exit.error;
}

/** Run an async action body and exit with the right code and a one-line reason. */
export function action<A extends unknown[]>(fn: (...args: A) => Promise<void>): (...args: A) => Promise<void> {
  return async (...args: A) => {
    try {
      await fn(...args);
      await exitWhenFlushed(Exit.ok);
    } catch (err) {
      process.stderr.write(`tandem: ${printable(redact((err as Error).message))}\n`);
      await exitWhenFlushed(exitCodeOf(err));
    }
  };
}

export function print(opts: { json?: boolean }, value: unknown, text: () => string): void {
  process.stdout.write(opts.json ? `${JSON.stringify(value, jsonReplacer, 2)}\n` : `${text()}\n`);
}

function jsonReplacer(_key: string, value: unknown): unknown {
  return typeof value === 'bigint' ? Number(value) : value;
}

/**
 * One attribute a line, names padded to the longest, for show and status commands; a
 * value that is an object or a list is shown as JSON. Escaped as table cells are.
 */
export function attributes(record: Record<string, unknown>): string {
  const lines = Object.entries(record).map(([k, v]) => [printable(k), printable(v !== null && typeof v === 'object' ? JSON.stringify(v, jsonReplacer) : String(v))] as const);
  const width = Math.max(0, ...lines.map(([k]) => k.length));
  return lines.map(([k, v]) => `${k.padEnd(width)}  ${v}`.trimEnd()).join('\n');
}

/** A fixed-width table for list commands. */
export function table(rows: Array<Record<string, unknown>>, columns: string[]): string {
  const cells = rows.map((r) => columns.map((c) => (r[c] === undefined || r[c] === null ? '' : printable(String(r[c])))));
  const widths = columns.map((c, i) => Math.max(c.length, ...cells.map((row) => row[i].length)));
  const line = (vals: string[]) => vals.map((v, i) => v.padEnd(widths[i])).join('  ').trimEnd();
  return [line(columns), line(widths.map((w) => '='.repeat(w))), ...cells.map(line)].join('\n');
}

