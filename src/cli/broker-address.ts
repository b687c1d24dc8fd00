// The broker a tandem command talks to, from -b, --tls-ca, --tls-cert, --tls-key and --tls-crl:
// one place that decides credentials (TANDEM_PASSWORD) and TLS, for every subcommand.
import type { Command } from 'commander';
import { parseBrokerAddress, type BrokerAddress } from '../admin/client.js';
import { readLinkTls } from '../admin/link-tls.js';
import { TandemError } from '../broker/errors.js';

export const brokerAddressHelp = '[amqp[s]://][user[/password]@]host[:port] of the broker (amqps:// is TLS, port 5671 by default)';
export const tlsCaHelp = 'PEM CA bundle that signed the broker\'s certificate (amqps:// only; default: the system CAs)';

/** The TLS files of a command line (each needs an amqps:// address). */
export interface TlsFileOptions {
  tlsCa?: string;
  tlsCert?: string;
  tlsKey?: string;
  tlsCrl?: string;
}

/** --tls-ca, --tls-cert, --tls-key on a command. */
export function addTlsOptions(cmd: Command): Command {
  return cmd
    .option('--tls-ca <file>', tlsCaHelp)
    .option('--tls-cert <file>', 'PEM client certificate to show the broker (amqps:// only; with --tls-key); without a user in -b it logs in as the user it names (SASL EXTERNAL)')
    .option('--tls-key <file>', 'PEM private key of --tls-cert')
    .option('--tls-crl <file>', "PEM CRLs (one per CA of the chain, root included) the broker's certificate chain is checked against (amqps:// only)");
}

export function brokerAddressOf(text: string, tls: TlsFileOptions = {}): BrokerAddress {
  const address = parseBrokerAddress(text);
  if (address.user && address.password === undefined && process.env.TANDEM_PASSWORD) address.password = process.env.TANDEM_PASSWORD;
  const given = Object.entries({ '--tls-ca': tls.tlsCa, '--tls-cert': tls.tlsCert, '--tls-key': tls.tlsKey, '--tls-crl': tls.tlsCrl }).filter(([, v]) => v !== undefined);
  if (given.length === 0) return address;
  // A CA or certificate with a plaintext address would suggest a protection that is not there.
  if (!address.tls) throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', `${given.map(([k]) => k).join(' and ')} need${given.length > 1 ? '' : 's'} an amqps:// broker address, not '${text}'`);
  const files = readLinkTls({ ca: tls.tlsCa, cert: tls.tlsCert, key: tls.tlsKey, crl: tls.tlsCrl }, { ca: '--tls-ca', cert: '--tls-cert', key: '--tls-key', crl: '--tls-crl' }, (m) => new TandemError('TANDEM_ERR_INVALID_ARGUMENT', m));
  // A certificate and no user: the certificate is the identity (SASL EXTERNAL).
  return { ...address, ...files, ...(files.cert !== undefined && !address.user ? { external: true } : {}) };
}

/** Timers in Node take at most 2^31-1 ms; a longer one fires at once. */
const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/**
 * --timeout SECONDS as milliseconds. Anything but a positive number a timer can wait
 * is a usage error naming the option: taken as it was, 'abc' (NaN) or '1e10' gave up
 * at once and was reported as a broker that did not answer (exit 69; 7 for tandem ha).
 */
export function timeoutMsOf(value: string | undefined, defaultSeconds: number): number {
  if (value === undefined) return defaultSeconds * 1000;
  // Digits, a decimal point allowed: Number() also took '0x10' as 16 s, '1e3' as 1000 s and ' 5' as 5 s.
  const ms = /^\d+(?:\.\d+)?$/.test(value) ? Number(value) * 1000 : Number.NaN;
  if (!Number.isFinite(ms) || ms <= 0 || ms > MAX_TIMEOUT_MS) {
    throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', `--timeout must be a number of seconds (digits, such as 10 or 2.5) above 0 and at most ${Math.floor(MAX_TIMEOUT_MS / 1000)}, not '${value}'`);
  }
  return Math.ceil(ms);
}
