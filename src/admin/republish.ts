// Publish stored messages again, byte for byte (same message id, properties and
// body), each to the queue it was on, and report how many of them, counted from
// the first, the broker has accepted: a caller that records that count can stop
// at any point and go on later without sending any message twice.
import rhea, { type Connection, type Delivery, type EventContext, type Sender } from 'rhea';
import { ConnectError, tlsOptions, type BrokerAddress } from './client.js';
import { TandemError } from '../broker/errors.js';

export interface StoredMessage {
  queue: string;
  /** The message exactly as its sender encoded it. */
  bytes: Buffer;
}

/** Transfers in flight at once. */
const WINDOW = 100;

/**
 * Send `messages` in order; `onAccepted(n)` is called whenever the first n are all
 * accepted (n only grows). Resolves with the count once every one is accepted;
 * rejects, after reporting what was accepted, on the first one the broker does not
 * accept or when the connection fails. At most WINDOW messages are held at once.
 */
export function republish(address: BrokerAddress, messages: Iterable<StoredMessage>, onAccepted: (n: number) => void, timeoutMs = 30_000): Promise<number> {
  const source = messages[Symbol.iterator]();
  let pending = source.next();
  if (pending.done) return Promise.resolve(0);
  const container = rhea.create_container({ id: `tandem-republish-${process.pid}` });
  return new Promise((resolve, reject) => {
    let next = 0;
    let contiguous = 0;
    let finished = false;
    /** Accepted, but not all before them yet: bounded by WINDOW. */
    const acceptedAhead = new Set<number>();
    const index = new Map<Delivery, { i: number; queue: string }>();
    const senders = new Map<string, Sender>();
    let idle: NodeJS.Timeout | undefined;
    const arm = () => {
      clearTimeout(idle);
      idle = setTimeout(() => finish(new ConnectError(`no answer from ${address.host}:${address.port} within ${timeoutMs} ms`)), timeoutMs);
    };
    const finish = (err?: Error) => {
      if (finished) return;
      finished = true;
      clearTimeout(idle);
      conn.close();
      if (err) reject(err);
      else resolve(contiguous);
    };
    const conn: Connection = container.connect({ host: address.host, port: address.port, username: address.user, password: address.password, reconnect: false, ...tlsOptions(address) } as never);
    conn.on('connection_error', (ctx: EventContext) => {
      const e = (ctx.connection as unknown as { error?: { description?: string; condition?: string } }).error;
      finish(new ConnectError(`${address.host}:${address.port} refused the connection: ${e?.description ?? e?.condition ?? 'no reason given'}`));
    });
    conn.on('disconnected', () => finish(new ConnectError(`connection to ${address.host}:${address.port} lost after ${contiguous} messages were accepted`)));
    conn.on('error', () => undefined);
    // Also while connecting: a host that drops SYNs would hold the connect for minutes.
    arm();
    const senderFor = (queue: string): Sender => {
      let s = senders.get(queue);
      if (!s) {
        s = conn.open_sender({ target: { address: queue }, autosettle: true } as never);
        s.on('sendable', pump);
        s.on('accepted', (ctx: EventContext) => onOutcome(ctx.delivery!, true));
        for (const ev of ['rejected', 'released', 'modified']) s.on(ev, (ctx: EventContext) => onOutcome(ctx.delivery!, false, ev));
        s.on('sender_error', (ctx: EventContext) => {
          const e = (ctx.sender as unknown as { error?: { description?: string; condition?: string } }).error;
          finish(new TandemError('TANDEM_ERR_PRECONDITION', `the broker refused to take messages for queue '${queue}': ${e?.description ?? e?.condition ?? 'no reason given'}`));
        });
        senders.set(queue, s);
      }
      return s;
    };
    const onOutcome = (d: Delivery, ok: boolean, what = 'accepted') => {
      const sent = index.get(d);
      if (sent === undefined) return;
      index.delete(d);
      arm();
      if (!ok) return finish(new TandemError('TANDEM_ERR_PRECONDITION', `the broker ${what} message ${sent.i + 1} (queue '${sent.queue}'); the ${contiguous} before it were accepted`));
      acceptedAhead.add(sent.i);
      const before = contiguous;
      while (acceptedAhead.delete(contiguous)) contiguous++;
      if (contiguous > before) onAccepted(contiguous);
      if (pending.done && index.size === 0) return finish();
      pump();
    };
    function pump(): void {
      // Bounded: at most WINDOW transfers in flight.
      while (!finished && !pending.done && index.size < WINDOW) {
        const m = pending.value;
        const s = senderFor(m.queue);
        if (!s.sendable()) return;
        index.set(s.send(m.bytes, undefined, 0), { i: next, queue: m.queue });
        next++;
        try {
          pending = source.next();
        } catch (err) {
          // A stored message that cannot be read: stop with what was accepted so far recorded.
          return finish(err as Error);
        }
      }
    }
    conn.on('connection_open', () => {
      arm();
      pump();
    });
  });
}
