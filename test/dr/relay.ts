// A TCP relay to a broker on 127.0.0.1, for DR tests that stall or cut one site's
// link to the other at a chosen moment (a DR link, a switchover's requests).
import { createServer, Socket } from 'node:net';

export interface Relay {
  /** host:port of the relay, to give as a source or reverse source. */
  url: string;
  /** Stop the connections open now, both ways (kept for release()). */
  hold(): void;
  /** Hold the connections that come from now on too (a link that stalls as it opens). */
  holdNew(): void;
  /** Close each connection that comes from now on at once (a cut link); lasts until close(). */
  refuseNew(): void;
  /** Let the held connections go on, and relay new ones again (unless refused). */
  release(): void;
  close(): void;
}

export async function relay(port: number): Promise<Relay> {
  const pairs: Array<[Socket, Socket]> = [];
  const held: Array<[Socket, Socket]> = [];
  let holding = false;
  let refusing = false;
  const server = createServer((inbound) => {
    inbound.on('error', () => inbound.destroy());
    if (refusing) return void inbound.destroy();
    const upstream = new Socket();
    upstream.connect(port, '127.0.0.1');
    const end = () => {
      inbound.destroy();
      upstream.destroy();
    };
    inbound.on('close', end);
    upstream.on('error', end).on('close', end);
    pairs.push([inbound, upstream]);
    if (holding) {
      held.push([inbound, upstream]);
      return;
    }
    inbound.pipe(upstream);
    upstream.pipe(inbound);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const hold = () => {
    for (const [i, u] of pairs) {
      if (held.some(([h]) => h === i)) continue;
      i.unpipe(u);
      u.unpipe(i);
      i.pause();
      u.pause();
      held.push([i, u]);
    }
  };
  return {
    url: `127.0.0.1:${(server.address() as { port: number }).port}`,
    hold,
    holdNew() {
      holding = true;
      hold();
    },
    refuseNew() {
      refusing = true;
    },
    release() {
      holding = false;
      for (const [i, u] of held.splice(0)) {
        i.pipe(u);
        u.pipe(i);
      }
    },
    close() {
      for (const [i, u] of pairs) {
        i.destroy();
        u.destroy();
      }
      server.close();
    },
  };
}
