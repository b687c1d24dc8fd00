// Talking to tandem brokers as an HA admin (backups admit only those): the local
// broker's HA-STATUS and HA-PROMOTE, and the status of every broker of ha-brokers-url.
import {
  ConnectError,
  endpointAddress,
  endpointKey,
  ManagementClient,
  parseBrokersUrl,
  peerWholeNumber,
  readEpochHistory,
  TandemError,
  type BrokerAddress,
  type LinkTls,
} from './broker-facts.js';
import type { BrokerView } from './election.js';

export interface HaSnapshot {
  state: string;
  epoch: number;
  lsn: number;
  primary?: string | null;
  backups?: Array<Record<string, unknown>>;
  [k: string]: unknown;
}

export type LocalStatus =
  | { kind: 'up'; status: HaSnapshot }
  | { kind: 'down'; why: string } // nothing answers
  | { kind: 'no-ha'; why: string } // answers, but has no HA-STATUS: not an HA build
  | { kind: 'error'; why: string }; // answers, but the request failed

async function request(address: BrokerAddress, operation: string, body: Record<string, unknown>, timeoutMs: number): Promise<unknown> {
  const client = await ManagementClient.connect(address, { timeoutMs, properties: { 'qpid.ha-admin': true } });
  try {
    return await client.request(operation, 'broker', 'broker', body);
  } finally {
    client.close();
  }
}

/**
 * A broker's HA-STATUS answer. Its epoch and LSN must be whole numbers (absent: 0):
 * taken with Number(), a malformed answer's NaN went into the promotion score, where
 * no comparison ranks it. Such an answer throws, and statusOf says it is an error.
 */
export function readHaStatus(body: unknown): HaSnapshot {
  const b = (body ?? {}) as Record<string, unknown>;
  const state = String(b.state ?? b['ha-state'] ?? 'unknown');
  return { ...b, state, epoch: peerWholeNumber(b.epoch, 'HA-STATUS epoch'), lsn: peerWholeNumber(b.lsn, 'HA-STATUS lsn') };
}

/** Ask one broker for its HA status; never throws. */
export async function statusOf(address: BrokerAddress, timeoutMs: number): Promise<LocalStatus> {
  try {
    return { kind: 'up', status: readHaStatus(await request(address, 'HA-STATUS', {}, timeoutMs)) };
  } catch (err) {
    const why = (err as Error).message;
    if (err instanceof ConnectError) return { kind: 'down', why };
    if (err instanceof TandemError && (err.code === 'TANDEM_ERR_NOT_IMPLEMENTED' || err.code === 'TANDEM_ERR_NOT_FOUND')) return { kind: 'no-ha', why };
    return { kind: 'error', why };
  }
}

/** HA-PROMOTE with the cluster-manager flag; rejects with the broker's reason. */
export async function promote(address: BrokerAddress, timeoutMs: number): Promise<HaSnapshot> {
  return readHaStatus(await request(address, 'HA-PROMOTE', { 'cluster-manager': true }, timeoutMs));
}

/**
 * The status of every broker of ha-brokers-url, unreachable ones included as such.
 * timeoutFor may give an address (host:port as in ha-brokers-url) its own timeout.
 */
export async function statusOfAll(
  brokersUrl: string,
  credentials: { user?: string; password?: string; external?: boolean; tls?: LinkTls },
  timeoutMs: number,
  timeoutFor?: (address: string) => number | undefined,
): Promise<BrokerView[]> {
  const parsed = parseBrokersUrl(brokersUrl);
  return Promise.all(
    parsed.endpoints.map(async (e): Promise<BrokerView> => {
      const key = endpointKey(e);
      const address = endpointAddress(e, parsed, { user: credentials.user ?? parsed.user, password: credentials.password ?? parsed.password, external: credentials.external }, credentials.tls ?? {});
      const s = await statusOf(address, timeoutFor?.(key) ?? timeoutMs);
      if (s.kind !== 'up') return { address: key, state: 'unreachable', epoch: 0, lsn: 0 };
      const lagById: Record<string, number> = {};
      for (const b of s.status.backups ?? []) {
        if (typeof b.id === 'string' && Number.isFinite(Number(b.lag))) lagById[b.id] = Number(b.lag);
      }
      const instance = typeof s.status.instance === 'string' ? s.status.instance : undefined;
      return { address: key, state: s.status.state, epoch: s.status.epoch, lsn: s.status.lsn, lagById, instance, history: readEpochHistory(s.status['epoch-history']) };
    }),
  );
}
