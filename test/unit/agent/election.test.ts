// The election rules of the resource agent (src/agent/election.ts), the XML
// reader for Pacemaker's output and the parameter reader, without a cluster.
import { describe, expect, it } from 'vitest';
import {
  aheadOfTarget,
  backupScores,
  betterCandidate,
  BEST_SCORE,
  formatIdentity,
  lagScore,
  parseIdentity,
  comparePositions,
  formatPublished,
  LOWEST_SCORE,
  mayBePromoted,
  parsePublished,
  PRIMARY_SCORE,
  promotionScore,
  promotionVerdict,
  type BrokerView,
} from '../../../src/agent/election.js';
import { judgePromotion } from '../../../src/ha/promotion-guard.js';
import { actionBudgetMs, readParams } from '../../../src/agent/params.js';
import { elements, sections } from '../../../src/agent/xml.js';

const view = (address: string, state: string, epoch: number, lsn: number): BrokerView => ({ address, state, epoch, lsn });

describe('election - positions', () => {
  it('epoch ranks before lsn', () => {
    expect(comparePositions({ epoch: 2, lsn: 1 }, { epoch: 1, lsn: 1000 })).toBeGreaterThan(0);
    expect(comparePositions({ epoch: 1, lsn: 5 }, { epoch: 1, lsn: 7 })).toBeLessThan(0);
    expect(comparePositions({ epoch: 1, lsn: 5 }, { epoch: 1, lsn: 5 })).toBe(0);
  });

  it('published positions round-trip and junk is ignored', () => {
    expect(parsePublished('node2', formatPublished('ready', { epoch: 3, lsn: 42 }))).toEqual({ node: 'node2', state: 'ready', epoch: 3, lsn: 42 });
    expect(parsePublished('node2', '')).toBeUndefined();
    expect(parsePublished('node2', 'ready:x:1')).toBeUndefined();
  });
});

describe('election - the primary scores its backups', () => {
  it('a ready stream gets the score of its lag, catchup and unattached brokers none, unknown nodes are left alone', () => {
    const streams = [
      { id: 'b2', state: 'ready', lag: 0 },
      { id: 'b3', state: 'ready', lag: 5000 },
      { id: 'b4', state: 'catchup', lag: 10 },
    ];
    const ids = new Map([
      ['node2', 'b2'],
      ['node3', 'b3'],
      ['node4', 'b4'],
      ['node5', 'gone'],
    ]);
    expect(backupScores(streams, ids)).toEqual(
      new Map<string, number | null>([
        ['node2', BEST_SCORE],
        ['node3', lagScore(5000)],
        ['node4', null],
        ['node5', null],
      ]),
    );
    expect(lagScore(5000)).toBeLessThan(BEST_SCORE);
    expect(lagScore(1024)).toBe(BEST_SCORE);
    expect(lagScore(1025)).toBe(BEST_SCORE - 10);
    expect(lagScore(2 ** 40)).toBe(BEST_SCORE - 310);
  });

  it('an identity is the broker id and, once known, its address', () => {
    expect(parseIdentity(formatIdentity({ id: 'abc', address: '10.0.0.1:5672' }))).toEqual({ id: 'abc', address: '10.0.0.1:5672' });
    expect(parseIdentity(formatIdentity({ id: 'abc' }))).toEqual({ id: 'abc' });
    expect(parseIdentity('')).toBeUndefined();
    expect(parseIdentity('a b c')).toBeUndefined();
  });
});

describe('election - pre-promote steering', () => {
  const pub = (node: string, state: string, lsn: number) => ({ node, state, epoch: 1, lsn });
  it('names the candidate ahead of the target, among this transition’s candidates only', () => {
    const all = new Set(['node2', 'node3']);
    expect(aheadOfTarget('node2', [pub('node2', 'ready', 421), pub('node3', 'ready', 434)], all)?.node).toBe('node3');
    expect(aheadOfTarget('node3', [pub('node2', 'ready', 421), pub('node3', 'ready', 434)], all)).toBeUndefined();
    expect(aheadOfTarget('node2', [pub('node2', 'ready', 421), pub('node3', 'ready', 421)], all), 'a tie keeps the target').toBeUndefined();
    expect(aheadOfTarget('node2', [pub('node3', 'ready', 434)], all), 'target not published yet').toBeUndefined();
    expect(aheadOfTarget('node2', [pub('node2', 'ready', 421), pub('node3', 'ready', 434)], new Set(['node2'])), 'not a candidate').toBeUndefined();
    expect(aheadOfTarget('node2', [pub('node2', 'ready', 421), pub('node3', 'joining', 900)], all), 'a joining old primary does not outrank a ready target').toBeUndefined();
    const three = new Set(['node1', 'node2', 'node3']);
    expect(
      aheadOfTarget('node1', [pub('node1', 'joining', 800), pub('node2', 'ready', 421), pub('node3', 'joining', 900)], three)?.node,
      'a joining target: the ready candidate, not the joining one with more data',
    ).toBe('node2');
  });
});

describe('election - who may be promoted (the promotion guard, src/ha/promotion-guard.ts)', () => {
  const joining = (epoch: number, lsn: number, history: Array<{ epoch: number; startLsn: number }> = [{ epoch: 1, startLsn: 1 }]) => ({ state: 'joining', epoch, lsn, history });
  const fresh = (address: string): BrokerView => ({ ...view(address, 'joining', 0, 0), history: [] });

  it('ready always; catchup never; joining not while another broker is beyond joining or the others cannot be asked', () => {
    expect(mayBePromoted({ state: 'ready', epoch: 1, lsn: 5 }, undefined)).toBe(true);
    expect(mayBePromoted({ state: 'catchup', epoch: 1, lsn: 5 }, [])).toBe(false);
    expect(mayBePromoted(joining(1, 1), [view('a', 'joining', 1, 1), view('b', 'catchup', 1, 1)])).toBe(false);
    expect(mayBePromoted(joining(1, 1), [view('a', 'joining', 1, 1), view('b', 'ready', 1, 1)])).toBe(false);
    expect(mayBePromoted(joining(1, 1), undefined), 'without knowing the others').toBe(false);
  });

  it('issue 21: a stale joining broker whose peers do not answer is refused, and the refusal says what it saw', () => {
    // Broker b was killed at LSN 11; a and c took 1,000 messages more and are down now.
    const seen = [view('a', 'unreachable', 0, 0), view('b', 'joining', 1, 11), view('c', 'unreachable', 0, 0)];
    const v = promotionVerdict(joining(1, 11), seen);
    expect(v.allowed).toBe(false);
    expect(v.checked).toMatch(/no majority of ha-brokers-url answered/);
    expect(v.checked).toMatch(/1 of 3 brokers/);
    expect(v.checked).toMatch(/epoch 1 LSN 11/);
    // One of them back, ahead: still refused, and it names the broker ahead.
    const oneBack = [view('a', 'unreachable', 0, 0), view('b', 'joining', 1, 11), view('c', 'joining', 1, 1018)];
    const w = promotionVerdict(joining(1, 11), oneBack);
    expect(w.allowed).toBe(false);
    expect(w.checked).toMatch(/c shows a newer position/);
    expect(w.newest).toMatchObject({ epoch: 1, lsn: 1018, where: 'c' });
    // The one ahead is promotable by the same rule.
    expect(mayBePromoted(joining(1, 1018), oneBack)).toBe(true);
  });

  it('a provably new cluster: a majority answers, none has an epoch history or a journal', () => {
    const v = promotionVerdict(joining(0, 0, []), [fresh('a'), fresh('b'), view('c', 'unreachable', 0, 0)]);
    expect(v).toMatchObject({ allowed: true, rule: 'new-cluster' });
    expect(mayBePromoted(joining(0, 0, []), [fresh('a'), view('b', 'unreachable', 0, 0), view('c', 'unreachable', 0, 0)]), 'a minority is no proof').toBe(false);
    expect(mayBePromoted(joining(0, 0, []), [fresh('a'), { ...view('b', 'joining', 0, 0), history: [{ epoch: 3, startLsn: 0 }] }, view('c', 'unreachable', 0, 0)]), 'a peer that had an epoch').toBe(false);
    // A peer that does not report its history makes the cluster not provably new; at (0, 0) it is not ahead either.
    expect(promotionVerdict(joining(0, 0, []), [fresh('a'), view('b', 'joining', 0, 0), view('c', 'unreachable', 0, 0)]).rule).toBe('none-newer');
  });

  it('a newer epoch in an epoch history counts, the candidate\'s own included', () => {
    const peers = [view('a', 'joining', 2, 40), { ...view('b', 'joining', 2, 30), history: [{ epoch: 3, startLsn: 31 }] }, view('c', 'unreachable', 0, 0)];
    expect(promotionVerdict(joining(2, 40), peers).newest).toMatchObject({ epoch: 3, lsn: 31 });
    expect(mayBePromoted(joining(2, 40), peers)).toBe(false);
    const mine = [view('a', 'joining', 2, 40), view('b', 'joining', 2, 30), view('c', 'unreachable', 0, 0)];
    expect(mayBePromoted(joining(2, 40, [{ epoch: 3, startLsn: 41 }]), mine)).toBe(false);
    expect(mayBePromoted(joining(2, 40, [{ epoch: 2, startLsn: 10 }]), mine)).toBe(true);
  });

  it('--accept-data-loss allows it and says what may be lost', () => {
    const v = judgePromotion(joining(1, 11), [view('a', 'unreachable', 0, 0), view('b', 'joining', 1, 11), view('c', 'joining', 1, 1018)], true);
    expect(v).toMatchObject({ allowed: true, rule: 'accept-data-loss', newest: { epoch: 1, lsn: 1018 }, candidate: { epoch: 1, lsn: 11 } });
    expect(v.checked).toMatch(/may be lost/);
  });
});

describe('election - promotion scores', () => {
  it('the primary keeps the top score; catchup and standalone get none', () => {
    expect(promotionScore({ state: 'active', epoch: 1, lsn: 9 }, undefined)).toBe(PRIMARY_SCORE);
    expect(promotionScore({ state: 'recovering', epoch: 1, lsn: 9 }, undefined)).toBe(PRIMARY_SCORE);
    expect(promotionScore({ state: 'catchup', epoch: 1, lsn: 9 }, [])).toBeNull();
    expect(promotionScore({ state: 'standalone', epoch: 1, lsn: 9 }, [])).toBeNull();
  });

  it('with a live primary, caught-up backups tie and lagging ones score lower, the more the lower', () => {
    const peers = (lsn: number) => [view('p', 'active', 4, 100_000), view('s', 'ready', 4, lsn)];
    const caughtUp = promotionScore({ state: 'ready', epoch: 4, lsn: 99_995 }, peers(99_995));
    expect(caughtUp).toBe(BEST_SCORE);
    const behind = promotionScore({ state: 'ready', epoch: 4, lsn: 95_000 }, peers(95_000))!;
    const further = promotionScore({ state: 'ready', epoch: 4, lsn: 50_000 }, peers(50_000))!;
    expect(behind).toBeLessThan(BEST_SCORE);
    expect(further).toBeLessThan(behind);
    expect(further).toBeGreaterThanOrEqual(LOWEST_SCORE);
    expect(promotionScore({ state: 'ready', epoch: 3, lsn: 100_000 }, peers(1)), 'an older epoch than the primary').toBe(LOWEST_SCORE);
  });

  it("the primary's own lag figure for this backup wins over comparing two snapshots", () => {
    const primary: BrokerView = { ...view('p', 'active', 4, 100_000), lagById: { me: 0, other: 5000 } };
    expect(promotionScore({ state: 'ready', epoch: 4, lsn: 90_000, id: 'me' }, [primary])).toBe(BEST_SCORE);
    expect(promotionScore({ state: 'ready', epoch: 4, lsn: 100_000, id: 'other' }, [primary])).toBeLessThan(BEST_SCORE);
    expect(promotionScore({ state: 'ready', epoch: 4, lsn: 90_000, id: 'unlisted' }, [primary])).toBeLessThan(BEST_SCORE);
  });

  it('without a primary, ready backups rank by position: the most advanced highest', () => {
    const peers = [view('a', 'ready', 2, 500), view('b', 'ready', 2, 700), view('c', 'ready', 3, 10), view('d', 'unreachable', 0, 0)];
    const score = (epoch: number, lsn: number) => promotionScore({ state: 'ready', epoch, lsn }, peers)!;
    expect(score(3, 10)).toBe(BEST_SCORE);
    expect(score(2, 700)).toBeLessThan(score(3, 10));
    expect(score(2, 500)).toBeLessThan(score(2, 700));
  });

  it('a ready backup that cannot ask the others scores by its own position, below BEST_SCORE', () => {
    const small = promotionScore({ state: 'ready', epoch: 1, lsn: 10 }, undefined)!;
    const large = promotionScore({ state: 'ready', epoch: 1, lsn: 1_000_000 }, undefined)!;
    expect(large).toBeGreaterThan(small);
    expect(large).toBeLessThan(BEST_SCORE);
    expect(small).toBeGreaterThanOrEqual(LOWEST_SCORE);
  });

  it('joining brokers get a score exactly when the promotion guard would promote them', () => {
    const all = [view('a', 'joining', 1, 50), view('b', 'joining', 1, 80), view('c', 'joining', 0, 0)];
    expect(promotionScore({ state: 'joining', epoch: 1, lsn: 80 }, all)).toBe(BEST_SCORE);
    expect(promotionScore({ state: 'joining', epoch: 1, lsn: 50 }, all), 'another joining broker is ahead').toBeNull();
    expect(promotionScore({ state: 'joining', epoch: 0, lsn: 0 }, all)).toBeNull();
    const minority = [view('a', 'joining', 1, 80), view('b', 'unreachable', 0, 0), view('c', 'unreachable', 0, 0)];
    expect(promotionScore({ state: 'joining', epoch: 1, lsn: 80 }, minority)).toBeNull();
    const withReady = [view('a', 'joining', 1, 80), view('b', 'ready', 1, 10), view('c', 'unreachable', 0, 0)];
    expect(promotionScore({ state: 'joining', epoch: 1, lsn: 80 }, withReady)).toBeNull();
    expect(promotionScore({ state: 'joining', epoch: 1, lsn: 80 }, undefined)).toBeNull();
    const newCluster = [0, 1, 2].map((i): BrokerView => ({ ...view(`n${i}`, 'joining', 0, 0), history: [] }));
    expect(promotionScore({ state: 'joining', epoch: 0, lsn: 0, history: [] }, newCluster)).toBe(BEST_SCORE);
  });

  it('every score fits Pacemaker (positive, below INFINITY)', () => {
    for (const lsn of [0, 1, 17, 1e6, 2 ** 52]) {
      for (const s of [promotionScore({ state: 'ready', epoch: 1, lsn }, undefined), promotionScore({ state: 'ready', epoch: 1, lsn }, [view('p', 'active', 1, 2 ** 53)])]) {
        expect(s).toBeGreaterThan(0);
        expect(s).toBeLessThan(1_000_000);
      }
    }
  });
});

describe('election - the re-check in promote', () => {
  const pub = (node: string, state: string, epoch: number, lsn: number) => ({ node, state, epoch, lsn });

  it('finds a ready backup further ahead', () => {
    const better = betterCandidate({ state: 'ready', epoch: 2, lsn: 100 }, [pub('node2', 'ready', 2, 120), pub('node3', 'ready', 2, 90)]);
    expect(better?.node).toBe('node2');
    expect(betterCandidate({ state: 'ready', epoch: 2, lsn: 120 }, [pub('node2', 'ready', 2, 120)]), 'a tie is not ahead').toBeUndefined();
  });

  it('a restarted old primary (joining) with an unreplicated tail does not block a ready backup', () => {
    expect(betterCandidate({ state: 'ready', epoch: 2, lsn: 100 }, [pub('node1', 'joining', 2, 500)])).toBeUndefined();
    expect(betterCandidate({ state: 'ready', epoch: 2, lsn: 100 }, [pub('node1', 'catchup', 3, 500)])).toBeUndefined();
  });

  it('on a cold start, a joining broker yields to any ready one and to a joining one with more data', () => {
    expect(betterCandidate({ state: 'joining', epoch: 2, lsn: 900 }, [pub('node2', 'ready', 1, 1)])?.node).toBe('node2');
    expect(betterCandidate({ state: 'joining', epoch: 2, lsn: 900 }, [pub('node2', 'joining', 2, 901)])?.node).toBe('node2');
    expect(betterCandidate({ state: 'joining', epoch: 2, lsn: 900 }, [pub('node2', 'joining', 2, 899)])).toBeUndefined();
  });
});

describe('agent - Pacemaker XML', () => {
  const crmMon = `<pacemaker-result api-version="2.30" request="crm_mon --output-as=xml">
  <nodes>
    <node name="node1" id="1" online="true" standby="false" type="member"/>
    <node name="node2" id="2" online="false" standby="false" type="member"/>
    <node name="node&amp;3" id="3" online="true" type="member"></node>
  </nodes>
  <resources><resource id="broker" role="Promoted"><node name="node1" id="1" cached="true"/></resource></resources>
</pacemaker-result>`;

  it('reads attributes of elements, entities decoded, and limits them to a section', () => {
    const nodes = elements(sections(crmMon, 'nodes')[0], 'node');
    expect(nodes.map((n) => [n.name, n.online])).toEqual([
      ['node1', 'true'],
      ['node2', 'false'],
      ['node&3', 'true'],
    ]);
    expect(elements(crmMon, 'node')).toHaveLength(4);
    expect(elements('<attribute name="master-broker" value="1000" host="n1"/>', 'attribute')[0]).toEqual({ name: 'master-broker', value: '1000', host: 'n1' });
    expect(elements('<attributes/>', 'attribute')).toEqual([]);
  });
});

describe('agent - parameters', () => {
  it('defaults match the meta-data; clone instance suffixes are dropped', () => {
    const p = readParams({ OCF_RESOURCE_INSTANCE: 'broker:2', HA_RSCTMP: '/run/resource-agents' });
    expect(p).toMatchObject({
      resource: 'broker',
      config: '/etc/tandem/tandemd.conf',
      binary: '/usr/bin/tandemd',
      tandem: '/usr/bin/tandem',
      user: 'tandem',
      pidfile: '/run/resource-agents/tandemd-broker.pid',
      startWait: 'joining',
      timeoutMs: 20_000,
      intervalMs: 0,
    });
    expect(p.clone.isClone).toBe(false);
  });

  it('Pacemaker 2.1 meta attributes: promotable from promoted_max, notify, timeouts in ms', () => {
    const p = readParams({ OCF_RESKEY_CRM_meta_clone_max: '3', OCF_RESKEY_CRM_meta_promoted_max: '1', OCF_RESKEY_CRM_meta_notify: 'true', OCF_RESKEY_CRM_meta_timeout: '60000', OCF_RESKEY_stop_wait: '7' });
    expect(p.clone).toEqual({ isClone: true, promotable: true, notify: true, promotedMax: 1 });
    expect(p.stopWaitMs).toBe(7000);
    expect(actionBudgetMs(p)).toBe(55_000);
    expect(actionBudgetMs({ ...p, timeoutMs: 10_000 })).toBe(8000);
  });

  it('bad values are OCF_ERR_CONFIGURED', () => {
    expect(() => readParams({ OCF_RESKEY_port: 'http' })).toThrow(/port/);
    expect(() => readParams({ OCF_RESKEY_start_wait: 'active' })).toThrow(/start_wait/);
  });
});
