// src/console/follow.ts: who may read GET /api/role and what the pages may ask. The
// hosts come from ha-brokers-url, so every odd thing a configuration can hold is fed
// in, and nothing but plain host names may reach a CSP header or a CORS answer.
import { describe, expect, it } from 'vitest';
import type { BrokerRow, ClusterView } from '../../../src/console/cluster-view.js';
import { clusterHosts, connectSources, isClusterOrigin, roleAnswer } from '../../../src/console/follow.js';

function view(addresses: string[], selfState: string | null = 'active', ha = true): ClusterView {
  const brokers = addresses.map((address, i) => ({ address, self: i === 0 && selfState !== null, state: i === 0 ? selfState : 'ready', epoch: 3 }) as unknown as BrokerRow);
  return { ha, brokers, primary: null, warnings: [], at: 0 };
}

describe('console follow', () => {
  it('console follow - the hosts of the cluster, without ports, duplicates or anything a header could be widened by', () => {
    const v = view(['10.0.0.1:5672', 'Broker-B.example:5672', '10.0.0.1:5673', '::1:5672', "evil.example; script-src *:1", '*:5672', 'x y:1']);
    expect(clusterHosts(v)).toEqual(['10.0.0.1', 'broker-b.example']);
    expect(connectSources(v)).toEqual(['http://10.0.0.1:*', 'https://10.0.0.1:*', 'http://broker-b.example:*', 'https://broker-b.example:*']);
    expect(clusterHosts(view(['10.0.0.1:5672'], 'standalone', false))).toEqual([]);
  });

  it('console follow - only a page of a cluster host may read the role', () => {
    const v = view(['10.0.0.1:5672', 'broker-b.example:5672']);
    for (const ok of ['http://10.0.0.1:9673', 'https://broker-b.example']) expect(isClusterOrigin(v, ok), ok).toBe(true);
    for (const no of [undefined, '', 'null', 'http://10.0.0.2:9673', 'http://broker-b.example.evil:80', 'http://evil.example/#10.0.0.1', 'http://10.0.0.1:9673/', 'ftp://10.0.0.1', 'http://user@10.0.0.1:1', 'https://broker-b.example:443' /* a browser never names the default port */, `http://10.0.0.1:1${'0'.repeat(600)}`]) {
      expect(isClusterOrigin(v, no), String(no)).toBe(false);
    }
    expect(isClusterOrigin(view(['10.0.0.1:5672'], 'standalone', false), 'http://10.0.0.1:9673')).toBe(false);
  });

  it('console follow - the role is this broker\'s own row only, and unknown before the first round', () => {
    expect(roleAnswer(view(['10.0.0.1:5672', '10.0.0.2:5672'], 'recovering'))).toEqual({ address: '10.0.0.1:5672', state: 'recovering', epoch: 3, primary: true });
    expect(roleAnswer(view(['10.0.0.1:5672'], 'catchup')).primary).toBe(false);
    expect(roleAnswer(view(['10.0.0.1:5672', '10.0.0.2:5672'], null))).toEqual({ address: null, state: null, epoch: null, primary: false });
  });
});
