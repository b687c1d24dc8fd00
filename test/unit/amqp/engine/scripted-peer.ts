// A scripted peer for the engine's state machines: a Connection fed bytes made by
// the tests' own encoder (test/helpers/amqp-frames.ts, independent of the
// engine's), with a scripted clock, every handler call recorded, and what the
// engine writes read back frame by frame.
import type { Composite } from '../../../../src/amqp/engine/composite.js';
import { Connection, type ConnectionOptions } from '../../../../src/amqp/engine/connection.js';
import type { Delivery } from '../../../../src/amqp/engine/delivery.js';
import type { EngineHandler } from '../../../../src/amqp/engine/handler.js';
import type { Link } from '../../../../src/amqp/engine/link.js';
import { FRAME_HEADER_SIZE, readFrame, readFrameHeader, startsProtocolHeader } from '../../../../src/amqp/engine/frames.js';
import type { ErrorInfo } from '../../../../src/amqp/engine/performative.js';

export type Written =
  | { kind: 'header'; id: number }
  | { kind: 'frame'; type: number; channel: number; name: string | undefined; fields: Record<string, unknown>; payload: Buffer; size: number };

export interface Recorded {
  event: string;
  error?: ErrorInfo;
  link?: Link;
  delivery?: Delivery;
}

export class ScriptedPeer {
  readonly conn: Connection;
  readonly events: Recorded[] = [];
  time = 1_000_000;
  private pending = Buffer.alloc(0);

  constructor(options: Partial<ConnectionOptions> = {}, handler: EngineHandler = {}) {
    const record = (event: string, extra: Omit<Recorded, 'event'> = {}) => this.events.push({ event, ...extra });
    const h: EngineHandler = {
      onSaslDone: (c, identity) => (record('sasl-done'), handler.onSaslDone?.(c, identity, '')),
      onOpen: (c) => (record('open'), handler.onOpen?.(c)),
      onClose: (c, error, byPeer) => (record(byPeer ? 'peer-close' : 'close', { error }), handler.onClose?.(c, error, byPeer)),
      onSessionBegin: (s) => (record('begin'), handler.onSessionBegin?.(s)),
      onSessionOpen: (s) => (record('session-open'), handler.onSessionOpen?.(s)),
      onSessionEnd: (s, error, byPeer) => (record(byPeer ? 'peer-end' : 'end', { error }), handler.onSessionEnd?.(s, error, byPeer)),
      onLinkAttach: (link) => {
        record('attach', { link });
        if (handler.onLinkAttach) return handler.onLinkAttach(link);
        link.accept();
        if (!link.isSender) link.flow(100);
      },
      onLinkOpen: (link) => (record('link-open', { link }), handler.onLinkOpen?.(link)),
      onLinkDetach: (link, error, byPeer) => (record(byPeer ? 'peer-detach' : 'detach', { link, error }), handler.onLinkDetach?.(link, error, byPeer)),
      onTransfer: (link, delivery) => (record('transfer', { link, delivery }), handler.onTransfer?.(link, delivery)),
      onDisposition: (delivery) => (record('disposition', { delivery }), handler.onDisposition?.(delivery)),
      onFlow: (link) => (record('flow', { link }), handler.onFlow?.(link)),
    };
    this.conn = new Connection({ role: 'server', containerId: 'engine-under-test', now: () => this.time, ...options, handler: h });
  }

  /** Feed bytes as one read each; nothing thrown is let through (the test fails on it). */
  feed(...chunks: Buffer[]): this {
    for (const c of chunks) this.conn.feed(c);
    return this;
  }

  /** Everything written since the last call, parsed. */
  written(): Written[] {
    this.pending = Buffer.concat([this.pending, ...this.conn.takeOutput()]);
    const out: Written[] = [];
    let at = 0;
    while (this.pending.length - at >= FRAME_HEADER_SIZE) {
      if (startsProtocolHeader(this.pending, at)) {
        out.push({ kind: 'header', id: this.pending[at + 4]! });
        at += 8;
        continue;
      }
      const type = this.pending[at + 5]! as 0 | 1;
      const header = readFrameHeader(this.pending, at, 0xffffffff, type);
      if (this.pending.length - at < header.size) break;
      const frame = readFrame(this.pending, at, header);
      out.push({
        kind: 'frame',
        type,
        channel: header.channel,
        name: frame.body?.def.name,
        fields: frame.body?.fields ?? {},
        payload: Buffer.from(this.pending.subarray(frame.payloadStart, frame.end)),
        size: header.size,
      });
      at += header.size;
    }
    this.pending = this.pending.subarray(at);
    return out;
  }

  /** The performatives written (names), since the last call. */
  names(): string[] {
    return this.written().map((w) => (w.kind === 'header' ? `header:${w.id}` : (w.name ?? 'empty')));
  }

  /** The error of the one frame named `name` written since the last call. */
  errorOf(name: 'close' | 'end' | 'detach', frames = this.written()): { condition: string; description?: string } | undefined {
    const f = frames.find((w) => w.kind === 'frame' && w.name === name) as (Written & { kind: 'frame' }) | undefined;
    const e = f?.fields.error as Composite | undefined;
    return e ? { condition: e.fields.condition as string, description: e.fields.description as string | undefined } : undefined;
  }

  eventNames(): string[] {
    return this.events.map((e) => e.event);
  }
}
