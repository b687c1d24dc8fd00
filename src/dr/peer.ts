// One management request to the other site of a DR pair (switchover, reattach,
// the fenced side asking how a switchover ended): tried on each broker of its URL
// in turn, since only the primary of an HA cluster answers. The credentials are
// the URL's, as for the bridge.
import { ConnectError, ManagementClient } from '../admin/client.js';
import type { LinkTls } from '../admin/link-tls.js';
import { endpointAddress } from '../admin/peer-addresses.js';
import { TandemError } from '../broker/errors.js';
import { parseBrokersUrl } from '../ha/brokers-url.js';
import { displaySource, parseSource } from './config.js';
import { knownPassword } from './credentials.js';

export type PeerReply = Record<string, unknown>;

/**
 * Send `op` to the first broker of `url` that serves it (over TLS verified with `tls`,
 * dr-tls-*, when the URL is amqps:; `givenPassword`: one the caller has and that is not
 * kept yet). A TandemError from the peer (it understood and said no) is returned as it
 * is; when no broker answers, a TandemError naming the site and the reason of each.
 */
export async function peerRequest(url: string, tls: LinkTls, op: string, body: Record<string, unknown>, timeoutMs: number, givenPassword?: string): Promise<PeerReply> {
  const parsed = parseBrokersUrl(url);
  const { endpoints, user } = parsed;
  // Sources are kept without their password (credentials.ts keeps it).
  const password = givenPassword ?? parsed.password ?? knownPassword(parseSource(url).source);
  const failures: string[] = [];
  for (const e of endpoints) {
    let client: ManagementClient | undefined;
    try {
      client = await ManagementClient.connect(endpointAddress(e, parsed, { user, password, external: user === undefined && tls.cert !== undefined }, tls), { timeoutMs });
      return (await client.request(op, 'broker', 'broker', body)) as PeerReply;
    } catch (err) {
      if (err instanceof TandemError) throw err;
      failures.push(`${e.host}:${e.port}: ${(err as Error).message}`);
      if (!(err instanceof ConnectError)) break;
    } finally {
      client?.close();
    }
  }
  throw new TandemError('TANDEM_ERR_PRECONDITION', `the other DR site ${displaySource(url)} cannot be reached (${failures.join('; ')}); nothing was changed there`);
}
