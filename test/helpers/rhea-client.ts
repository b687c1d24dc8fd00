// Promise helpers over a plain rhea client for integration tests: connect, send
// with at-least-once settlement tracking, receive with explicit outcomes, browse.
// Every wait has a deadline; a failure names what was awaited.
import rhea, { type Connection, type ConnectionOptions, type Delivery, type EventContext, type Message, type Receiver, type Sender } from 'rhea';

export type OutcomeName = 'accepted' | 'rejected' | 'released' | 'modified' | 'settled';

export interface Outcome {
  state: OutcomeName;
  /** The rejected outcome's error, if any. */
  error?: { condition?: string; description?: string };
  /** The delivery's remote state (modified fields etc.). */
  remoteState?: unknown;
}

export interface Received {
  message: Message;
  delivery: Delivery;
}

export class ClientError extends Error {
  constructor(
    message: string,
    readonly condition?: string,
    readonly description?: string,
  ) {
    super(message);
    this.name = 'ClientError';
  }
}

export interface ConnectOptions extends Partial<ConnectionOptions> {
  port: number;
  host?: string;
  timeoutMs?: number;
}

function withDeadline<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: no result within ${ms} ms`)), ms);
    }),
  ]);
}

let containerSeq = 0;

export class TestClient {
  readonly errors: unknown[] = [];
  closed = false;

  private constructor(readonly connection: Connection) {}

  /** Open a connection; rejects with the broker's error (SASL failure, refusal) if it does not open. */
  static connect(options: ConnectOptions): Promise<TestClient> {
    const container = rhea.create_container({ id: `test-${process.pid}-${++containerSeq}` });
    const { timeoutMs = 10_000, ...rest } = options;
    const conn = container.connect({ host: '127.0.0.1', reconnect: false, idle_time_out: 0, ...rest } as ConnectionOptions);
    const client = new TestClient(conn);
    conn.on('error', (err: unknown) => client.errors.push(err));
    conn.on('disconnected', () => (client.closed = true));
    conn.on('connection_close', () => (client.closed = true));
    return withDeadline(
      new Promise<TestClient>((resolve, reject) => {
        conn.once('connection_open', () => resolve(client));
        conn.once('connection_error', (ctx: EventContext) => {
          // SASL failures come as ctx.error (a ConnectionError), a close frame's error on the connection.
          const e = ((ctx as unknown as { error?: unknown }).error ?? (ctx.connection as unknown as { error?: unknown }).error) as
            | { condition?: string; description?: string; message?: string }
            | undefined;
          const description = e?.description ?? e?.message;
          reject(new ClientError(`connection refused: ${e?.condition} ${description}`, e?.condition, description));
        });
        conn.once('disconnected', (ctx: EventContext) => {
          const e = (ctx as unknown as { error?: Error & { condition?: string; description?: string } }).error;
          reject(new ClientError(`disconnected before open: ${e?.message ?? e?.description ?? 'no reason'}`, e?.condition, e?.description ?? e?.message));
        });
      }),
      timeoutMs,
      'connect',
    ).catch((err) => {
      conn.close();
      throw err;
    });
  }

  /** Open a sender; rejects with the link error if the broker refuses it. */
  openSender(address: string | undefined, options: Record<string, unknown> = {}): Promise<Sender> {
    const sender = this.connection.open_sender({ target: { address }, ...options } as never);
    return linkOpened(sender, 'sender');
  }

  /** Open a receiver with no credit (add it with receiver.add_credit) and manual settlement. */
  openReceiver(source: string | Record<string, unknown>, options: Record<string, unknown> = {}): Promise<TestReceiver> {
    const src = typeof source === 'string' ? { address: source } : source;
    const receiver = this.connection.open_receiver({ source: src, credit_window: 0, autoaccept: false, ...options } as never);
    const r = new TestReceiver(receiver);
    return linkOpened(receiver, 'receiver').then(() => r);
  }

  /**
   * Send messages on a new (or given) sender and wait for every one to be settled by
   * the broker. Returns one outcome per message, in order.
   */
  async send(address: string | Sender | undefined, messages: Array<Message | string> | number, options: { timeoutMs?: number; sender?: Record<string, unknown> } = {}): Promise<Outcome[]> {
    const sender = typeof address === 'object' ? address : await this.openSender(address, options.sender);
    const list: Message[] = typeof messages === 'number' ? Array.from({ length: messages }, (_, i) => ({ body: `m${i}` })) : messages.map((m) => (typeof m === 'string' ? { body: m } : m));
    const outcomes: Outcome[] = new Array(list.length);
    const presettled = (sender as unknown as { snd_settle_mode?: number }).snd_settle_mode === 1 || (options.sender?.snd_settle_mode === 1);
    let done = 0;
    await withDeadline(
      new Promise<void>((resolve, reject) => {
        const index = new Map<Delivery, number>();
        const record = (state: OutcomeName) => (ctx: EventContext) => {
          const i = index.get(ctx.delivery as Delivery);
          if (i === undefined || outcomes[i]) return;
          const rs = (ctx.delivery as unknown as { remote_state?: { error?: { condition?: string; description?: string } } }).remote_state;
          outcomes[i] = { state, error: rs?.error, remoteState: rs };
          if (++done === list.length) finish();
        };
        const handlers: Array<[string, (ctx: EventContext) => void]> = [
          ['accepted', record('accepted')],
          ['rejected', record('rejected')],
          ['released', record('released')],
          ['modified', record('modified')],
          ['settled', record('settled')],
          ['sendable', () => pump()],
          ['sender_close', () => fail('sender closed')],
          ['sender_error', () => fail('sender error')],
        ];
        const finish = () => {
          for (const [ev, h] of handlers) sender.removeListener(ev, h);
          resolve();
        };
        const fail = (why: string) => {
          for (const [ev, h] of handlers) sender.removeListener(ev, h);
          const e = (sender as unknown as { error?: { condition?: string; description?: string } }).error;
          reject(new ClientError(`${why}: ${e?.condition} ${e?.description}`, e?.condition, e?.description));
        };
        for (const [ev, h] of handlers) sender.on(ev, h);
        let next = 0;
        const pump = () => {
          while (next < list.length && sender.sendable()) {
            const d = sender.send(list[next]);
            if (presettled) {
              outcomes[next] = { state: 'settled' };
              done++;
            } else index.set(d, next);
            next++;
          }
          if (presettled && done === list.length) finish();
        };
        if (list.length === 0) finish();
        else pump();
      }),
      options.timeoutMs ?? 10_000,
      `send ${list.length} to ${typeof address === 'string' ? address : 'sender'} (${done} settled)`,
    );
    if (typeof address !== 'object') sender.close();
    return outcomes;
  }

  /** Receive n messages from an address, accept them, and close the link. */
  async receiveAndAccept(address: string, n: number, timeoutMs = 10_000): Promise<Message[]> {
    const r = await this.openReceiver(address);
    r.receiver.add_credit(n);
    const got = await r.next(n, timeoutMs);
    for (const g of got) g.delivery.accept();
    await r.close();
    return got.map((g) => g.message);
  }

  /** Browse (distribution-mode copy) up to n messages, waiting at most timeoutMs for the n-th. */
  async browse(address: string, n: number, timeoutMs = 5000): Promise<Message[]> {
    const r = await this.openReceiver({ address, distribution_mode: 'copy' });
    r.receiver.add_credit(n);
    const got = await r.next(n, timeoutMs);
    await r.close();
    return got.map((g) => g.message);
  }

  close(): Promise<void> {
    if (this.closed) return Promise.resolve();
    return withDeadline(
      new Promise<void>((resolve) => {
        this.connection.once('connection_close', () => resolve());
        this.connection.once('disconnected', () => resolve());
        this.connection.close();
      }),
      5000,
      'close',
    ).catch(() => undefined);
  }

  /** Drop the socket without a close frame (a crashing client). */
  destroy(): void {
    (this.connection as unknown as { socket?: { destroy(): void } }).socket?.destroy();
  }
}

export class TestReceiver {
  readonly received: Received[] = [];
  private waiters: Array<() => void> = [];
  closedByPeer = false;

  constructor(readonly receiver: Receiver) {
    receiver.on('message', (ctx: EventContext) => {
      this.received.push({ message: ctx.message as Message, delivery: ctx.delivery as Delivery });
      for (const w of this.waiters.splice(0)) w();
    });
    receiver.on('receiver_close', () => {
      this.closedByPeer = true;
      for (const w of this.waiters.splice(0)) w();
    });
  }

  /** Wait until n more messages than already taken have arrived; returns and removes them. */
  async next(n: number, timeoutMs = 10_000): Promise<Received[]> {
    await withDeadline(
      new Promise<void>((resolve) => {
        const check = () => {
          if (this.received.length >= n) resolve();
          else this.waiters.push(check);
        };
        check();
      }),
      timeoutMs,
      `receive ${n} from ${this.receiver.source?.address} (got ${this.received.length})`,
    ).catch((err) => {
      throw err;
    });
    return this.received.splice(0, n);
  }

  /** Take whatever arrives within ms (for asserting that nothing more comes). */
  async drainFor(ms: number): Promise<Received[]> {
    await new Promise((r) => setTimeout(r, ms));
    return this.received.splice(0);
  }

  close(): Promise<void> {
    return withDeadline(
      new Promise<void>((resolve) => {
        if (this.closedByPeer || !this.receiver.is_open()) return resolve();
        this.receiver.once('receiver_close', () => resolve());
        this.receiver.close();
      }),
      5000,
      'receiver close',
    ).catch(() => undefined);
  }
}

function linkOpened<L extends Sender | Receiver>(link: L, kind: 'sender' | 'receiver'): Promise<L> {
  return withDeadline(
    new Promise<L>((resolve, reject) => {
      const onOpen = () => {
        // A refused attach carries a null terminus and is followed by a detach with the error.
        const remote = (link as unknown as { remote: { attach?: { source?: unknown; target?: unknown } } }).remote.attach;
        const terminus = (remote ? (kind === 'sender' ? remote.target : remote.source) : undefined) as { value?: unknown } | null | undefined;
        // rhea keeps a null field as a typed null ({ value: null }); a real terminus has a value list.
        if (remote && (terminus == null || terminus.value == null)) return;
        cleanup();
        resolve(link);
      };
      const onClose = () => {
        cleanup();
        const e = (link as unknown as { error?: { condition?: string; description?: string } }).error;
        reject(new ClientError(`${kind} refused: ${e?.condition} ${e?.description}`, e?.condition, e?.description));
      };
      const cleanup = () => {
        link.removeListener(`${kind}_open`, onOpen);
        link.removeListener(`${kind}_close`, onClose);
        link.removeListener(`${kind}_error`, onClose);
      };
      link.on(`${kind}_open`, onOpen);
      link.on(`${kind}_close`, onClose);
      link.on(`${kind}_error`, onClose);
    }),
    10_000,
    `${kind} attach`,
  );
}

/** Send `payload` as a transfer's bytes, as they are (rhea's raw send); its outcome. */
export function sendRaw(sender: Sender, payload: Buffer): Promise<{ state: string; condition?: string }> {
  return new Promise((resolve) => {
    const d = (sender as unknown as { send(m: Buffer, tag?: unknown, format?: number): unknown }).send(payload, undefined, 0);
    const onOutcome = (state: string) => (ctx: { delivery: unknown }) => {
      if (ctx.delivery !== d) return;
      const rs = (ctx.delivery as { remote_state?: { error?: { condition?: string } } }).remote_state;
      resolve({ state, condition: rs?.error?.condition });
    };
    sender.on('accepted', onOutcome('accepted'));
    sender.on('rejected', onOutcome('rejected'));
  });
}

/** Body of a received message as a string (rhea gives strings for AMQP strings). */
export function bodyOf(m: Message): unknown {
  const b = m.body as unknown;
  if (b && typeof b === 'object' && 'content' in (b as object)) return (b as { content: Buffer }).content.toString();
  return b;
}

/**
 * Browse `count` messages of a queue and return their bodies. Each copy is settled as it
 * comes: the receiving session frees only settled deliveries, so more than its 2,048
 * unsettled would stop it.
 */
export async function browseBodies(port: number, queue: string, count: number, timeoutMs = 60_000): Promise<string[]> {
  const client = await TestClient.connect({ port });
  try {
    const r = await client.openReceiver({ address: queue, distribution_mode: 'copy' });
    r.receiver.on('message', (ctx: EventContext) => ctx.delivery!.accept());
    r.receiver.add_credit(count);
    return (await r.next(count, timeoutMs)).map((g) => String(bodyOf(g.message)));
  } finally {
    await client.close();
  }
}
