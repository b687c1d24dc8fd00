// A TCP relay to a broker on 127.0.0.1, for DR tests that stall or cut one site's
// link to the other at a chosen moment (a DR link, a switchover's requests), or hold
// back one request on its way (a message that arrives late).
import { createServer, Socket } from 'node:net';

export interface Relay {
  /** host:port of the relay, to give as a source or reverse source. */
  url: string;
  /** Stop the connections open now, both ways (kept for release()). */
  hold(): void;
  /** Hold the connections that come from now on too (a link that stalls as it opens). */
  holdNew(): void;
  /** Close the connections open now, both ways (a link cut mid-transfer); new ones are relayed. */
  cut(): void;
  /** Close each connection that comes from now on at once (a cut link), until admitNew(). */
  refuseNew(): void;
  /** Relay new connections again after refuseNew(). */
  admitNew(): void;
  /** Let the held connections go on, and relay new ones again (unless refused). */
  release(): void;
  /**
   * On the connections that come from now on: keep back what the client sends from the
   * chunk holding `text` on (an AMQP request naming its operation, say), until
   * releaseMatching(text). The connection to the broker stays open even if the client
   * gives up and goes, so what was kept arrives late, as a request held up on the way.
   */
  holdMatching(text: string): void;
  /** How many connections hold data back for `text` now. */
  heldFor(text: string): number;
  /** Send on what was kept back for `text`, and stop looking for it. */
  releaseMatching(text: string): void;
  close(): void;
}

interface Pair {
  inbound: Socket;
  upstream: Socket;
  /** Client-to-broker data goes through a listener (holdMatching), not a pipe. */
  watched: boolean;
  /** What a watched pair keeps back, and for which text. */
  kept?: { text: string; chunks: Buffer[] };
}

export async function relay(port: number): Promise<Relay> {
  const pairs: Pair[] = [];
  const held: Pair[] = [];
  const matching = new Set<string>();
  let holding = false;
  let refusing = false;
  const forward = (p: Pair, chunk: Buffer) => {
    if (!p.upstream.write(chunk)) {
      p.inbound.pause();
      p.upstream.once('drain', () => p.inbound.resume());
    }
  };
  const watch = (p: Pair) => {
    let tail = Buffer.alloc(0);
    p.inbound.on('data', (chunk: Buffer) => {
      if (p.kept) return void p.kept.chunks.push(chunk);
      const seen = Buffer.concat([tail, chunk]);
      const text = [...matching].find((t) => seen.includes(t));
      if (text !== undefined) {
        p.kept = { text, chunks: [chunk] };
        return;
      }
      tail = seen.subarray(Math.max(0, seen.length - 256));
      forward(p, chunk);
    });
  };
  const server = createServer((inbound) => {
    inbound.on('error', () => inbound.destroy());
    if (refusing) return void inbound.destroy();
    const upstream = new Socket();
    upstream.connect(port, '127.0.0.1');
    const p: Pair = { inbound, upstream, watched: matching.size > 0 };
    // A pair keeping data back stays open towards the broker when the client goes (it arrives late).
    inbound.on('close', () => {
      if (!p.kept) upstream.destroy();
    });
    upstream.on('error', () => undefined).on('close', () => inbound.destroy());
    pairs.push(p);
    if (p.watched) watch(p);
    if (holding) {
      inbound.pause();
      held.push(p);
      return;
    }
    if (!p.watched) inbound.pipe(upstream);
    upstream.pipe(inbound);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const hold = () => {
    for (const p of pairs) {
      if (held.includes(p)) continue;
      p.inbound.unpipe(p.upstream);
      p.upstream.unpipe(p.inbound);
      p.inbound.pause();
      p.upstream.pause();
      held.push(p);
    }
  };
  return {
    url: `127.0.0.1:${(server.address() as { port: number }).port}`,
    hold,
    holdNew() {
      holding = true;
      hold();
    },
    cut() {
      for (const p of pairs.splice(0)) {
        p.inbound.destroy();
        p.upstream.destroy();
      }
      held.length = 0;
    },
    refuseNew() {
      refusing = true;
    },
    admitNew() {
      refusing = false;
    },
    release() {
      holding = false;
      for (const p of held.splice(0)) {
        if (p.watched) p.inbound.resume();
        else p.inbound.pipe(p.upstream);
        p.upstream.pipe(p.inbound);
      }
    },
    holdMatching(text) {
      matching.add(text);
    },
    heldFor(text) {
      return pairs.filter((p) => p.kept?.text === text).length;
    },
    releaseMatching(text) {
      matching.delete(text);
      for (const p of pairs) {
        if (p.kept?.text !== text) continue;
        const { chunks } = p.kept;
        p.kept = undefined;
        for (const c of chunks) forward(p, c);
      }
    },
    close() {
      for (const p of pairs) {
        p.inbound.destroy();
        p.upstream.destroy();
      }
      server.close();
    },
  };
}
