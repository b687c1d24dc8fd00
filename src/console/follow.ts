// What lets a page follow the primary from one broker's console to another's
// (docs/console.md, "Following the primary"). A page whose own broker died has no
// session anywhere else (cookies are per origin), so it asks the other consoles one
// question that needs no session: GET /api/role, this broker's HA role and epoch,
// nothing else. Browsers let a page read another origin's answer only under CORS,
// and let it ask only if its own CSP allows: both are granted to the hosts of
// ha-brokers-url (any port: a console's port is its own setting), never to others.
import type { ClusterView } from './cluster-view.js';

const PRIMARY_STATES = new Set(['active', 'recovering']);

export interface RoleAnswer {
  address: string | null;
  state: string | null;
  epoch: number | null;
  primary: boolean;
}

/** This broker's role, as far as its own row of the view says (null before the first round). */
export function roleAnswer(view: ClusterView): RoleAnswer {
  const self = view.brokers.find((b) => b.self);
  if (!self) return { address: null, state: null, epoch: null, primary: false };
  return { address: self.address, state: self.state, epoch: self.epoch, primary: self.state !== null && PRIMARY_STATES.has(self.state) };
}

/**
 * The hosts of the cluster's brokers (names and IPv4 addresses); none outside a
 * cluster. IPv6 literals are left out: a CSP source cannot name one, so a page
 * could not ask it anyway.
 */
export function clusterHosts(view: ClusterView): string[] {
  if (!view.ha) return [];
  const hosts = new Set<string>();
  for (const b of view.brokers) {
    const i = b.address.lastIndexOf(':');
    const host = (i > 0 ? b.address.slice(0, i) : b.address).toLowerCase();
    // Only what a CSP host-source may hold: nothing in a header can be widened by a name.
    if (/^[a-z0-9.-]+$/.test(host)) hosts.add(host);
  }
  return [...hosts];
}

/** CSP connect-src sources for the pages: the other consoles of the cluster. */
export function connectSources(view: ClusterView): string[] {
  return clusterHosts(view).flatMap((h) => [`http://${h}:*`, `https://${h}:*`]);
}

/** Whether a request's Origin is a page of one of the cluster's consoles (so it may read /api/role). */
export function isClusterOrigin(view: ClusterView, origin: string | undefined): boolean {
  if (!origin || origin.length > 512) return false;
  let url: URL;
  try {
    url = new URL(origin);
  } catch {
    return false;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return false;
  // An Origin is scheme://host[:port] and nothing more: anything else is not a browser's.
  if (url.origin !== origin) return false;
  return clusterHosts(view).includes(url.hostname.toLowerCase());
}
