// The broker a tandem command talks to, from -b and --tls-ca: one place that
// decides credentials (TANDEM_PASSWORD) and TLS, for every subcommand.
import { readFileSync } from 'node:fs';
import { parseBrokerAddress, type BrokerAddress } from '../admin/client.js';
import { TandemError } from '../broker/errors.js';

export const brokerAddressHelp = '[amqp[s]://][user[/password]@]host[:port] of the broker (amqps:// is TLS, port 5671 by default)';
export const tlsCaHelp = 'PEM CA bundle that signed the broker\'s certificate (amqps:// only; default: the system CAs)';

export function brokerAddressOf(text: string, tlsCaFile?: string): BrokerAddress {
  const address = parseBrokerAddress(text);
  if (address.user && address.password === undefined && process.env.TANDEM_PASSWORD) address.password = process.env.TANDEM_PASSWORD;
  if (tlsCaFile === undefined) return address;
  // A CA with a plaintext address would suggest a protection that is not there.
  if (!address.tls) throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', `--tls-ca needs an amqps:// broker address, not '${text}'`);
  try {
    address.ca = readFileSync(tlsCaFile, 'utf8');
  } catch (err) {
    throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', `cannot read --tls-ca ${tlsCaFile}: ${(err as Error).message}`);
  }
  return address;
}
