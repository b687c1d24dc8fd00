// Reliable DR, after Apache Qpid's reliable_replication_test: 100,000 messages
// through an enqueue-only DR queue while the link is cut and re-created again
// and again (the bridge's connection closed from the source side, the source
// SIGSTOPped past the idle timeout, the secondary killed with -9 and
// restarted). At the end the secondary holds exactly the input: no loss, no
// duplicates, same order.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { tandem } from '../helpers/tandem-cli.js';
import { contents, drFlush, drStatus, mgmt, send } from './helpers.js';

const TOTAL = Number(process.env.TANDEM_DR_RELIABLE_COUNT ?? 100_000);

describe('DR reliable replication', () => {
  let primary: TestBroker;
  let secondary: TestBroker;
  const started: TestBroker[] = [];

  beforeAll(async () => {
    primary = await TestBroker.start();
    secondary = await TestBroker.start();
    started.push(primary, secondary);
  });
  afterAll(async () => {
    primary?.signal('SIGCONT');
    await killAllBrokers();
  });

  async function connectedAgain(since: string | undefined): Promise<void> {
    await waitFor(
      async () => {
        const r = (await drStatus(secondary.port))[0];
        return r?.link === 'connected' || r?.link === 'copying' ? r : undefined;
      },
      { timeout: 30_000, interval: 50, name: `bridge reconnected after ${since}` },
    );
  }

  it(`DR - ${TOTAL} messages, enqueue-only, link cut again and again: exactly the input on the secondary`, async () => {
    await tandem(['queue', 'add', 'reliable', '--durable', '-b', primary.url]);
    await mgmt(secondary.port, 'DR-ADD', { queue: 'reliable', source: primary.url, mode: 'enqueue-only' });
    await connectedAgain('start');
    const bodies = Array.from({ length: TOTAL }, (_, i) => i);
    const t0 = Date.now();
    let sendDone = false;
    const sending = (async () => {
      // In chunks, so the cuts below land while messages are still flowing.
      for (let i = 0; i < TOTAL; i += 5000) await send(primary.port, 'reliable', bodies.slice(i, i + 5000), { durable: false, window: 2000 });
      sendDone = true;
    })();
    const cuts: string[] = [];
    const kinds = ['close-connection', 'sigstop', 'kill-secondary'] as const;
    for (let n = 0; cuts.length < 6 || !sendDone; n++) {
      if (n > 30) break;
      await new Promise((r) => setTimeout(r, 700));
      const kind = kinds[n % kinds.length];
      if (kind === 'close-connection') {
        const list = await tandem(['connection', 'list', '--json', '-b', primary.url]);
        const conn = (JSON.parse(list.stdout) as Array<{ id: string; container?: string }>).find((c) => c.container?.startsWith('tandem-dr-'));
        if (!conn) continue;
        const closed = await tandem(['connection', 'close', conn.id, '-b', primary.url]);
        expect(closed.code, closed.stderr).toBe(0);
      } else if (kind === 'sigstop') {
        // Longer than the bridge's 4 s idle timeout: it drops the link and reconnects after SIGCONT.
        primary.signal('SIGSTOP');
        await new Promise((r) => setTimeout(r, 5000));
        primary.signal('SIGCONT');
      } else {
        const dataDir = secondary.dataDir;
        await secondary.kill();
        secondary = await TestBroker.start({ dataDir });
        started.push(secondary);
      }
      cuts.push(kind);
      await connectedAgain(kind);
    }
    await sending;
    const sentMs = Date.now() - t0;
    await drFlush(primary.port, secondary.port, 120_000);
    const got = (await contents(secondary.port, 'reliable', TOTAL)) as number[];
    console.log(`reliable: ${TOTAL} messages sent in ${sentMs} ms, replicated after ${Date.now() - t0} ms, cuts: ${cuts.join(', ')}`);
    expect(cuts.length).toBeGreaterThanOrEqual(5);
    expect(got.length).toBe(TOTAL);
    let firstBad = -1;
    for (let i = 0; i < TOTAL && firstBad < 0; i++) if (got[i] !== i) firstBad = i;
    expect(firstBad, `first difference at ${firstBad}: ${JSON.stringify(got.slice(Math.max(0, firstBad - 2), firstBad + 3))}`).toBe(-1);
    const rows = await drStatus(secondary.port);
    expect(rows[0].depth).toBe(TOTAL);
  }, 240_000);
});
