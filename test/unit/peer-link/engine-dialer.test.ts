// The SASL a peer link logs in with, as rhea's client chose it for the same
// credentials: no SASL layer without a user (auth=no takes that), PLAIN only with a
// password, EXTERNAL only with a TLS client certificate, ANONYMOUS beside it when asked.
// And the largest delivery a peer link takes: a primary or DR source that sends more
// has its link detached, not a delivery of any size assembled.
import { constants as bufferConstants } from 'node:buffer';
import { createServer, type Server, type Socket } from 'node:net';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { Connection } from '../../../src/amqp/engine/connection.js';
import type { Link } from '../../../src/amqp/engine/link.js';
import { Transport } from '../../../src/amqp/engine/transport.js';
import { EngineDialer, MAX_STREAM_MESSAGE_SIZE, saslFor } from '../../../src/peer-link/engine-dialer.js';
import { BATCH_BYTES } from '../../../src/peer-link/outbound.js';
import { PeerSearch } from '../../../src/peer-link/search.js';
import type { PeerError } from '../../../src/peer-link/transport.js';
import { MAX_RECORD_BYTES } from '../../../src/store/segment.js';
import { framed } from '../../helpers/peer-stream-fuzz.js';

const tls = { ca: 'CA', cert: 'CERT', key: 'KEY' };

describe('engine dialer - SASL as configured', () => {
  it('PLAIN: a user and a password log in by PLAIN; a user alone by ANONYMOUS; no user, no SASL', () => {
    expect(saslFor({ mechanism: 'PLAIN', user: 'ha', password: 'pw' }, undefined)).toEqual({ user: 'ha', password: 'pw', mechanisms: ['PLAIN'] });
    expect(saslFor({ mechanism: 'PLAIN', user: 'ha', password: undefined }, undefined)).toEqual({ user: 'ha', mechanisms: ['ANONYMOUS'] });
    expect(saslFor({ mechanism: 'PLAIN', user: undefined, password: 'pw' }, undefined)).toBeUndefined();
    expect(saslFor({ mechanism: 'PLAIN', user: '', password: 'pw' }, undefined)).toBeUndefined();
  });

  it('ANONYMOUS: no SASL layer', () => {
    expect(saslFor({ mechanism: 'ANONYMOUS' }, tls)).toBeUndefined();
  });

  it('EXTERNAL: the certificate over TLS, ANONYMOUS after it when allowed; nothing without a certificate', () => {
    expect(saslFor({ mechanism: 'EXTERNAL', orAnonymous: false }, tls)).toEqual({ external: true, mechanisms: ['EXTERNAL'] });
    expect(saslFor({ mechanism: 'EXTERNAL', orAnonymous: true }, tls)).toEqual({ external: true, mechanisms: ['EXTERNAL', 'ANONYMOUS'] });
    expect(saslFor({ mechanism: 'EXTERNAL', orAnonymous: true }, { ca: 'CA' })).toEqual({ external: false, mechanisms: ['ANONYMOUS'] });
    expect(saslFor({ mechanism: 'EXTERNAL', orAnonymous: false }, undefined)).toBeUndefined();
  });
});

/**
 * A broker in the engine's server role that serves any link a peer attaches and sends
 * it the payloads it is given as credit allows, ignoring the max-message-size the peer
 * asked for (a broken or hostile primary or DR source). Notes what each attach asked for.
 */
class OversizingPeer {
  readonly askedMaxMessageSize: Array<bigint | undefined> = [];
  readonly detachesHeard: Array<string | undefined> = [];
  private readonly sockets = new Set<Socket>();
  private server: Server | undefined;
  port = 0;

  constructor(private readonly payloads: () => Buffer[]) {}

  async start(): Promise<this> {
    this.server = createServer((socket) => this.accept(socket));
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as { port: number }).port;
    return this;
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server!.close(() => resolve()));
  }

  private accept(socket: Socket): void {
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
    const queued = new Map<Link, Buffer[]>();
    const pump = (link: Link) => {
      const q = queued.get(link) ?? [];
      while (q.length > 0 && link.sendable) link.send(q.shift()!, { settled: true });
    };
    const conn = new Connection({
      role: 'server',
      containerId: 'oversizing-peer',
      handler: {
        onLinkAttach: (link) => {
          const fields = link.remoteAttach!.fields;
          this.askedMaxMessageSize.push(fields['max-message-size'] as bigint | undefined);
          // Ignored: our sends are not held to it.
          delete fields['max-message-size'];
          link.accept();
          queued.set(link, this.payloads());
        },
        onFlow: (link) => pump(link),
        onLinkDetach: (link, error) => {
          queued.delete(link);
          this.detachesHeard.push(error?.condition);
        },
      },
    });
    new Transport(conn, socket);
  }
}

const dialOptions = (port: number) => ({
  host: '127.0.0.1',
  port,
  tls: undefined,
  credentials: { mechanism: 'ANONYMOUS' as const },
  idleTimeoutMs: 10_000,
  handshakeDeadlineMs: 2_000,
  properties: {},
});

/** A stream message of about `bytes` bytes (application properties, then a data section). */
const streamMessage = (k: string, bytes: number) => framed({ k }, Buffer.alloc(bytes, 0x61));

/** Dial the peer, attach one receiving link, and record what it reports until it is detached or `ms` pass. */
async function receiveFrom(dialer: EngineDialer, port: number, ms = 5_000) {
  const heard = { messages: [] as Array<{ k: unknown; bytes: number }>, detached: undefined as PeerError | undefined, detachedCount: 0, disconnected: 0, closedWithError: 0 };
  let attached!: () => void;
  const whenAttached = new Promise<void>((r) => (attached = r));
  let detachedNow!: () => void;
  const whenDetached = new Promise<void>((r) => (detachedNow = r));
  const conn = dialer.dial(dialOptions(port), {
    opened: () => {
      conn.openReceiver(
        { address: '$dr.replication', properties: {}, creditWindow: 10 },
        {
          attached: () => attached(),
          message: (m) => void heard.messages.push({ k: m.application_properties.k, bytes: m.body?.length ?? 0 }),
          detached: (error) => {
            heard.detached = error;
            heard.detachedCount++;
            detachedNow();
          },
        },
      );
    },
    closedWithError: () => void heard.closedWithError++,
    disconnected: () => void heard.disconnected++,
    heard: () => undefined,
  });
  await whenAttached;
  await Promise.race([whenDetached, new Promise((r) => setTimeout(r, ms))]);
  return { heard, conn };
}

describe('engine dialer - the largest message a peer link takes', () => {
  it('MAX_STREAM_MESSAGE_SIZE: bounded, above the largest record a source can send (two of MAX_RECORD_BYTES: a non-durable message and its subject) and a batch beside it', () => {
    expect(MAX_STREAM_MESSAGE_SIZE).toBeGreaterThanOrEqual(2 * MAX_RECORD_BYTES + BATCH_BYTES + 1024 * 1024);
    // Below what Buffer can hold: a delivery past that failed in Buffer.concat instead of being refused.
    expect(MAX_STREAM_MESSAGE_SIZE).toBeLessThan(bufferConstants.MAX_LENGTH);
  });

  it('the receiving link asks for MAX_STREAM_MESSAGE_SIZE in its attach (it asked for none)', async () => {
    const peer = await new OversizingPeer(() => [streamMessage('small', 100)]).start();
    try {
      const { heard, conn } = await receiveFrom(new EngineDialer('dialer-test'), peer.port, 300);
      expect(peer.askedMaxMessageSize).toEqual([BigInt(MAX_STREAM_MESSAGE_SIZE)]);
      expect(heard.messages.map((m) => m.k)).toEqual(['small']);
      conn.abandon();
    } finally {
      await peer.stop();
    }
  });

  it('a peer sending past it over many frames: the delivery is not assembled, the link is detached with amqp:link:message-size-exceeded and reported once; what came before is delivered', async () => {
    const limit = 2 * 1024 * 1024;
    // Frames of at most 1 MiB (our max-frame-size): the last one is several frames, each under the limit.
    const peer = await new OversizingPeer(() => [streamMessage('fits', limit - 1024), streamMessage('too-big', 3 * limit), streamMessage('after', 100)]).start();
    try {
      const { heard, conn } = await receiveFrom(new EngineDialer('dialer-test', limit), peer.port);
      expect(peer.askedMaxMessageSize).toEqual([BigInt(limit)]);
      expect(heard.messages.map((m) => m.k)).toEqual(['fits']);
      expect(heard.detached?.condition).toBe('amqp:link:message-size-exceeded');
      expect(heard.detached?.description).toMatch(/max-message-size 2097152/);
      expect(heard.detachedCount).toBe(1);
      // The peer was told why; the connection itself stays (the owner decides what to do).
      await waitUntil(() => peer.detachesHeard.length > 0);
      expect(peer.detachesHeard).toEqual(['amqp:link:message-size-exceeded']);
      expect(heard.disconnected + heard.closedWithError).toBe(0);
      conn.abandon();
    } finally {
      await peer.stop();
    }
  });

  it('followed by a search: the oversized delivery is a loss of the peer, reported once; searching again follows it again', async () => {
    const limit = 64 * 1024;
    const peer = await new OversizingPeer(() => [streamMessage('fits', 1024), streamMessage('too-big', 2 * 1024 * 1024)]).start();
    const heard = { following: 0, lost: [] as string[], messages: 0, refused: [] as string[] };
    const search = new PeerSearch({
      dialer: new EngineDialer('dialer-test', limit),
      endpoints: [{ host: '127.0.0.1', port: peer.port }],
      log: pino({ level: 'silent' }),
      dial: { tls: undefined, credentials: { mechanism: 'ANONYMOUS' }, idleTimeoutMs: 10_000, handshakeDeadlineMs: 2_000, properties: {} },
      hello: () => ({ address: '$dr.replication', properties: {}, creditWindow: 10 }),
      judge: () => ({ serving: true }),
      retryMs: 100,
      selfRetryMs: 1000,
      answerTimeoutMs: 5000,
      silenceLimitMs: 20_000,
      names: { link: 'DR link', peer: 'source' },
      tlsOption: 'dr-tls',
      events: {
        refused: (_a, reason) => void heard.refused.push(reason),
        following: () => void heard.following++,
        message: () => void heard.messages++,
        lost: (reason) => void heard.lost.push(reason),
      },
    });
    try {
      for (let round = 1; round <= 2; round++) {
        search.start();
        await waitUntil(() => heard.lost.length === round);
        expect(heard.following).toBe(round);
        expect(heard.messages).toBe(round);
        expect(heard.lost[round - 1]).toMatch(/^DR link closed: delivery \d+ (of|reached) \d+ bytes, over max-message-size 65536$/);
        expect(search.isFollowing).toBe(false);
      }
      // Nothing more is reported for a link let go.
      await new Promise((r) => setTimeout(r, 200));
      expect(heard.lost).toHaveLength(2);
      expect(heard.refused).toEqual([]);
    } finally {
      search.stop();
      await peer.stop();
    }
  });
});

async function waitUntil(fn: () => boolean, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!fn()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}
