// A small test host on tandem's AMQP engine in the server role: a TCP listener
// on 127.0.0.1, SASL (ANONYMOUS and/or PLAIN against a user table), in-memory
// queues by address. Foreign clients (rhea, python-proton) talk to it in the
// interop tests. Special addresses: `forbidden` refuses the attach; a consumer of
// `detach-after-1` is detached with an error after its first message.
import { readFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { type TLSSocket, createServer as createTlsServer } from 'node:tls';
import { Connection } from '../../src/amqp/engine/connection.js';
import type { Delivery } from '../../src/amqp/engine/delivery.js';
import type { Link } from '../../src/amqp/engine/link.js';
import { Transport } from '../../src/amqp/engine/transport.js';

export interface EngineHostOptions {
  users?: Record<string, string>;
  anonymous?: boolean;
  maxFrameSize?: number;
  maxMessageSize?: number;
  /** Credit each receiving link is given (and kept topped up to). */
  credit?: number;
  /** Serve TLS (PEM file paths); a client certificate the CA signed logs in with EXTERNAL as its CN. */
  tls?: { cert: string; key: string; ca: string };
}

export class EngineHost {
  readonly queues = new Map<string, Buffer[]>();
  /** Outcomes the clients gave to what the host sent them, by name. */
  readonly outcomes: string[] = [];
  readonly logins: string[] = [];
  readonly closes: { condition?: string; description?: string; byPeer: boolean }[] = [];
  readonly connections: Connection[] = [];
  private readonly consumers = new Set<Link>();
  private readonly sockets = new Set<Socket>();
  private server: Server | undefined;
  port = 0;

  constructor(private readonly options: EngineHostOptions = {}) {}

  async start(): Promise<this> {
    const tls = this.options.tls;
    this.server = tls
      ? createTlsServer({ cert: readFileSync(tls.cert), key: readFileSync(tls.key), ca: readFileSync(tls.ca), requestCert: true, rejectUnauthorized: false }, (socket) => this.accept(socket))
      : createServer((socket) => this.accept(socket));
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as { port: number }).port;
    return this;
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }

  private queue(address: string): Buffer[] {
    let q = this.queues.get(address);
    if (!q) this.queues.set(address, (q = []));
    return q;
  }

  private accept(socket: Socket): void {
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
    const users = this.options.users;
    const credit = this.options.credit ?? 100;
    const tlsSocket = this.options.tls ? (socket as TLSSocket) : undefined;
    const cn = tlsSocket?.authorized ? (tlsSocket.getPeerCertificate().subject?.CN as string | undefined) : undefined;
    const conn = new Connection({
      role: 'server',
      containerId: 'engine-host',
      maxFrameSize: this.options.maxFrameSize,
      maxMessageSize: this.options.maxMessageSize,
      sasl: {
        anonymous: this.options.anonymous ?? !users,
        plain: users ? async (user, password) => (users[user] === password ? user : undefined) : undefined,
        externalIdentity: cn,
      },
      handler: {
        onSaslDone: (_c, identity) => this.logins.push(identity),
        onClose: (_c, error, byPeer) => this.closes.push({ ...error, byPeer }),
        onLinkAttach: (link) => {
          const address = this.addressOf(link);
          if (address === 'forbidden') return link.refuse({ condition: 'amqp:unauthorized-access', description: 'forbidden here' });
          link.accept();
          if (link.isSender) {
            this.consumers.add(link);
            this.pump(link);
          } else {
            link.flow(credit);
          }
        },
        onLinkDetach: (link) => this.consumers.delete(link),
        onTransfer: (link, delivery) => {
          this.queue(this.addressOf(link)).push(delivery.payload);
          delivery.accept();
          if (link.credit <= credit / 2) link.flow(credit);
          for (const c of this.consumers) if (this.addressOf(c) === this.addressOf(link)) this.pump(c);
        },
        onDisposition: (d) => this.onOutcome(d),
        onFlow: (link) => {
          if (link.isSender) this.pump(link);
        },
      },
    });
    this.connections.push(conn);
    new Transport(conn, socket);
  }

  private addressOf(link: Link): string {
    const terminus = link.isSender ? link.source : link.target;
    return (terminus?.fields.address as string | undefined) ?? '';
  }

  private onOutcome(d: Delivery): void {
    if (d.incoming) return;
    const outcome = d.outcome ?? 'settled';
    this.outcomes.push(outcome);
    if (outcome === 'released' || outcome === 'modified') this.queue(this.addressOf(d.link)).unshift(d.payload);
    d.settle();
  }

  private pump(link: Link): void {
    const address = this.addressOf(link);
    const q = this.queue(address);
    // Bounded by the messages queued and the credit given.
    while (q.length > 0 && link.sendable) {
      link.send(q.shift()!);
      if (address === 'detach-after-1') {
        link.detach({ condition: 'amqp:resource-limit-exceeded', description: 'one is enough' });
        this.consumers.delete(link);
        return;
      }
    }
  }
}
