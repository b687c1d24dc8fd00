// Publish stored messages again, byte for byte (same message id, properties and
// body), each to the queue it was on, and report how many of them, counted from
// the first, the broker has accepted: a caller that records that count can stop
// at any point and go on later without sending any message twice.
import rhea, { type Connection, type Delivery, type EventContext, type Sender } from 'rhea';
import { ConnectError, type BrokerAddress } from './client.js';
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
 * accepted (n only grows). Resolves with the total once every one is accepted;
 * rejects, after reporting what was accepted, on the first one the broker does not
 * accept or when the connection fails.
 */
export function republish(address: BrokerAddress, messages: readonly StoredMessage[], onAccepted: (n: number) => void, timeoutMs = 30_000): Promise<number> {
  if (messages.length === 0) return Promise.resolve(0);
  const container = rhea.create_container({ id: `tandem-republish-${process.pid}` });
  return new Promise((resolve, reject) => {
    let next = 0;
    let contiguous = 0;
    let finished = false;
    const accepted = new Uint8Array(messages.length);
    const index = new Map<Delivery, number>();
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
    const conn: Connection = container.connect({ host: address.host, port: address.port, username: address.user, password: address.password, reconnect: false } as never);
    conn.on('connection_error', (ctx: EventContext) => {
      const e = (ctx.connection as unknown as { error?: { description?: string; condition?: string } }).error;
      finish(new ConnectError(`${address.host}:${address.port} refused the connection: ${e?.description ?? e?.condition ?? 'no reason given'}`));
    });
    conn.on('disconnected', () => finish(new ConnectError(`connection to ${address.host}:${address.port} lost after ${contiguous} of ${messages.length} messages were accepted`)));
    conn.on('error', () => undefined);
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
      const i = index.get(d);
      if (i === undefined) return;
      index.delete(d);
      arm();
      if (!ok) return finish(new TandemError('TANDEM_ERR_PRECONDITION', `the broker ${what} message ${i + 1} (queue '${messages[i]!.queue}'); ${contiguous} were accepted before it`));
      accepted[i] = 1;
      const before = contiguous;
      while (contiguous < messages.length && accepted[contiguous] === 1) contiguous++;
      if (contiguous > before) onAccepted(contiguous);
      if (contiguous === messages.length) return finish();
      pump();
    };
    function pump(): void {
      // Bounded: at most WINDOW transfers per call.
      while (!finished && next < messages.length && index.size < WINDOW) {
        const m = messages[next]!;
        const s = senderFor(m.queue);
        if (!s.sendable()) return;
        index.set(s.send(m.bytes, undefined, 0), next);
        next++;
      }
    }
    conn.on('connection_open', () => {
      arm();
      pump();
    });
  });
}
