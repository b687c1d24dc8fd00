// A hostile "other site" of a DR pair: a real AMQP peer on TCP, built on tandem's own
// engine in the server role (as test/helpers/engine-host.ts), that answers every
// $management request with what the test chooses (any status, any body: NaN, 2^60,
// strings, lists of the wrong shape, huge lists, nesting) and records what it was
// asked. Put where a real tandemd expects its DR peer (a DR source, the other site of
// a switchover, a reattach or a fenced source's question), it shows what tandemd takes
// from such answers. Its DR address ($dr.replication) is refused, unless the test gives
// the link properties a DR source would attach with (then it attaches and sends the
// stream messages the test gives, if any, as the bridge's credit allows).
import { createServer, type Server, type Socket } from 'node:net';
import { Connection } from '../../src/amqp/engine/connection.js';
import type { Delivery } from '../../src/amqp/engine/delivery.js';
import { terminus, type Link } from '../../src/amqp/engine/link.js';
import { type Plain, decodeMessage, encodeMessage, toAmqp } from '../../src/amqp/engine/message.js';
import { Transport } from '../../src/amqp/engine/transport.js';
import type { AmqpValue } from '../../src/amqp/engine/types.js';

/** One reply: a status (default 200) and a body (an AmqpValue goes as typed: NaN doubles, 2^60 ulongs). */
export interface HostileAnswer {
  /** A number as a management peer sends it, or any value (a map with its own toString key, say). */
  status?: Plain;
  description?: Plain;
  body?: Plain;
}

export interface HostileRequest {
  op: string;
  body: Record<string, unknown>;
}

/** The operation's reply, or undefined: no reply at all (the request times out). */
export type Script = (request: HostileRequest) => HostileAnswer | undefined;

export class HostileSite {
  readonly requests: HostileRequest[] = [];
  /** When set, $dr.replication is attached with these link properties (a DR source's), and nothing is sent on it. */
  drSourceProperties: Record<string, Plain> | undefined;
  /** Stream messages (encodeDrMessage) sent, presettled, on each DR link it attaches. */
  drStream: Buffer[] = [];
  /** How many DR links it attached. */
  drLinks = 0;
  /** Per DR link, what of drStream it has still to send. */
  private readonly drPending = new Map<Link, Buffer[]>();
  private readonly replyLinks = new Map<string, Link>();
  private readonly sockets = new Set<Socket>();
  private server: Server | undefined;
  private nextReply = 0;
  port = 0;

  constructor(public script: Script) {}

  get url(): string {
    return `127.0.0.1:${this.port}`;
  }

  /** How many `op` requests it was sent. */
  count(op: string): number {
    return this.requests.filter((r) => r.op === op).length;
  }

  /** Listen on 127.0.0.1 (`port` 0: any free one). */
  async start(port = 0): Promise<this> {
    this.server = createServer((socket) => this.accept(socket));
    await new Promise<void>((resolve, reject) => {
      this.server!.once('error', reject);
      this.server!.listen(port, '127.0.0.1', resolve);
    });
    this.port = (this.server.address() as { port: number }).port;
    return this;
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }

  private accept(socket: Socket): void {
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
    socket.on('error', () => undefined);
    const conn = new Connection({
      role: 'server',
      containerId: 'hostile-site',
      // Any login is taken: the answers are the attack, not the door.
      sasl: { anonymous: true, plain: async (user) => user },
      handler: {
        onLinkAttach: (link) => this.onAttach(link),
        onLinkDetach: (link) => {
          for (const [address, l] of this.replyLinks) if (l === link) this.replyLinks.delete(address);
          this.drPending.delete(link);
        },
        onFlow: (link) => this.sendStream(link),
        onTransfer: (link, delivery) => this.onRequest(link, delivery),
      },
    });
    new Transport(conn, socket);
  }

  private onAttach(link: Link): void {
    if (link.isSender) {
      const address = link.source?.fields.address as string | undefined;
      if (address === '$dr.replication') {
        if (!this.drSourceProperties) return link.refuse({ condition: 'amqp:not-found', description: 'no DR source here' });
        this.drLinks++;
        // Attach properties are keyed by symbols (fields, 3.2): the DR source's own are.
        const properties: AmqpValue = { type: 'map', value: Object.entries(this.drSourceProperties).map(([k, v]): [AmqpValue, AmqpValue] => [{ type: 'symbol', value: k }, toAmqp(v)]) };
        link.accept({ source: link.source ?? null, properties });
        this.drPending.set(link, [...this.drStream]);
        return;
      }
      // The management client's dynamic reply queue.
      const reply = `reply-${++this.nextReply}`;
      link.accept({ source: terminus('source', { address: reply, dynamic: true }) });
      this.replyLinks.set(reply, link);
      return;
    }
    link.accept();
    link.flow(100);
  }

  private sendStream(link: Link): void {
    const pending = this.drPending.get(link);
    while (pending && pending.length > 0 && link.sendable) link.send(pending.shift()!, { settled: true });
  }

  private onRequest(link: Link, delivery: Delivery): void {
    delivery.accept();
    if (link.credit <= 50) link.flow(100);
    const m = decodeMessage(delivery.payload);
    const request: HostileRequest = { op: String(m.applicationProperties.operation), body: (m.body ?? {}) as Record<string, unknown> };
    this.requests.push(request);
    const answer = this.script(request);
    const to = this.replyLinks.get(String(m.properties['reply-to']));
    if (answer === undefined || !to?.sendable) return;
    const status = answer.status ?? 200;
    const bytes = encodeMessage({
      correlationId: m.properties['message-id'] as string,
      applicationProperties: { statusCode: status, statusDescription: answer.description ?? (typeof status === 'number' && status < 300 ? 'OK' : 'refused') },
      body: answer.body ?? null,
    });
    to.send(bytes, { settled: true });
  }
}
