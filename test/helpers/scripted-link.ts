// A scripted in-process network implementing the peer-link transport both ways
// (src/peer-link/transport.ts): a Follower or a DR bridge dials it, a replication
// or DR source serves on it, and the test decides what the wire does. Each
// connection is two ordered pipes (as TCP is: a delay never reorders) whose
// delays come from a seeded PRNG; a fault is scripted from a hook that sees every
// frame as it is sent and as it arrives: drop the connection (both ends hear at
// once, what was in flight is gone), or partition an address (nothing crosses
// either way, FINs included, until healed). Deterministic under fake timers.
import rhea from 'rhea';
import { prng } from '../../src/util/prng.js';
import { bodyBytes } from '../../src/peer-link/sections.js';
import type {
  ConnectionEvents,
  DeliveryRef,
  DialOptions,
  InboundDelivery,
  PeerConnection,
  PeerDialer,
  PeerError,
  PeerReceiver,
  PeerSender,
  ReceiverEvents,
  ReceiverOptions,
} from '../../src/peer-link/transport.js';

export type FrameKind = 'open' | 'attach' | 'flow' | 'transfer' | 'disposition' | 'detach' | 'close' | 'empty';

/** What a hook is shown of one frame. */
export interface Frame {
  address: string;
  /** c2s: dialler to server; s2c: server to dialler. */
  dir: 'c2s' | 's2c';
  kind: FrameKind;
  /** transfer: the bytes, and the stream message's kind (its `k` property); disposition: whether accepted. */
  bytes?: Buffer;
  streamKind?: string;
  accepted?: boolean;
  /** Which connection (dials are numbered from 1). */
  connection: number;
}

/** What listens at an address: the open's properties and what serves an attaching link (as the daemon's special senders do). */
export interface ScriptedServer {
  properties: Record<string, unknown>;
  attach(link: PeerSender): { flow(): void; closed(): void } | undefined;
}

/** One direction of a connection: frames in order, each after its delay, held while partitioned. */
class Pipe {
  private readonly queue: Array<{ at: number; run: () => void }> = [];
  private last = 0;
  private timer: NodeJS.Timeout | undefined;
  held = false;
  dead = false;

  constructor(private readonly delay: () => number) {}

  push(run: () => void): void {
    if (this.dead) return;
    const at = Math.max(this.last, Date.now() + this.delay());
    this.last = at;
    this.queue.push({ at, run });
    this.schedule();
  }

  hold(on: boolean): void {
    this.held = on;
    if (on) {
      clearTimeout(this.timer);
      this.timer = undefined;
    } else {
      // Held frames go on from now, in order.
      const now = Date.now();
      for (const f of this.queue) f.at = Math.max(f.at, now);
      this.last = Math.max(this.last, now);
      this.schedule();
    }
  }

  kill(): void {
    this.dead = true;
    this.queue.length = 0;
    clearTimeout(this.timer);
  }

  private schedule(): void {
    if (this.held || this.dead || this.timer || this.queue.length === 0) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      // Bounded: at most what is queued now; frames pushed meanwhile get their own turn.
      for (let n = this.queue.length; n > 0 && !this.held && !this.dead && this.queue.length > 0 && this.queue[0]!.at <= Date.now(); n--) this.queue.shift()!.run();
      this.schedule();
    }, Math.max(0, this.queue[0]!.at - Date.now()));
  }
}

interface Wire {
  id: number;
  address: string;
  c2s: Pipe;
  s2c: Pipe;
  /** Abandoned or dropped: nothing more is heard at either end. */
  clientGone: boolean;
  serverGone: boolean;
  server?: { closed(): void };
  heartbeat?: NodeJS.Timeout;
  client: ConnectionEvents;
}

export class ScriptedNetwork implements PeerDialer {
  private readonly servers = new Map<string, ScriptedServer>();
  private readonly partitioned = new Set<string>();
  private readonly wires = new Set<Wire>();
  private readonly rnd: () => number;
  private dials = 0;
  /** Sees every frame as it is sent (before it enters its pipe) and as it arrives. */
  onSent: (f: Frame) => void = () => undefined;
  onArrived: (f: Frame) => void = () => undefined;

  constructor(
    seed: number,
    private readonly maxDelayMs = 5,
  ) {
    this.rnd = prng(seed);
  }

  listen(address: string, server: ScriptedServer): void {
    this.servers.set(address, server);
  }

  /** Nothing crosses to or from `address` (FINs neither) until heal. */
  partition(address: string): void {
    this.partitioned.add(address);
    for (const w of this.wires) if (w.address === address) (w.c2s.hold(true), w.s2c.hold(true));
  }

  heal(address: string): void {
    this.partitioned.delete(address);
    for (const w of this.wires) if (w.address === address) (w.c2s.hold(false), w.s2c.hold(false));
  }

  /** Every connection to `address` fails at once: both ends hear it, what was in flight is lost. */
  drop(address: string): void {
    for (const w of [...this.wires]) if (w.address === address) this.kill(w, true);
  }

  /**
   * Partition `address` for `ms` as the server sends its `nth` stream message of
   * `kind` (a batch on the wire). `happened()`: whether it came to that.
   */
  partitionAt(address: string, kind: string, nth: number, ms: number): { happened(): boolean } {
    let seen = 0;
    let done = false;
    this.onSent = (f) => {
      if (done || f.address !== address || f.dir !== 's2c' || f.streamKind !== kind || ++seen < nth) return;
      done = true;
      this.partition(address);
      setTimeout(() => this.heal(address), ms);
    };
    return { happened: () => done };
  }

  /**
   * Drop every connection to `address` on every `every`th frame that `match`es, at
   * most `times` times: as the frame is sent (so it is lost) or once it has arrived.
   */
  dropOn(address: string, match: (f: Frame) => boolean, o: { every: number; times: number; when: 'lost' | 'delivered' }): { count(): number } {
    let seen = 0;
    let drops = 0;
    const hook = (f: Frame) => {
      if (f.address !== address || !match(f) || ++seen % o.every !== 0 || drops >= o.times) return;
      drops++;
      this.drop(address);
    };
    if (o.when === 'lost') this.onSent = hook;
    else this.onArrived = hook;
    return { count: () => drops };
  }

  /** Connections dialled so far. */
  get dialled(): number {
    return this.dials;
  }

  dial(o: DialOptions, events: ConnectionEvents): PeerConnection {
    const address = `${o.host}:${o.port}`;
    const delay = () => Math.floor(this.rnd() * (this.maxDelayMs + 1));
    const wire: Wire = { id: ++this.dials, address, c2s: new Pipe(delay), s2c: new Pipe(delay), clientGone: false, serverGone: false, client: events };
    if (this.partitioned.has(address)) (wire.c2s.hold(true), wire.s2c.hold(true));
    this.wires.add(wire);
    const server = this.servers.get(address);
    const frame = (dir: Frame['dir'], kind: FrameKind, extra: Partial<Frame> = {}): Frame => ({ address, dir, kind, connection: wire.id, ...extra });
    /** Server to dialler: the dialler hears every frame (it is alive), then what it carries. */
    const toClient = (f: Frame, run: () => void) => {
      this.onSent(f);
      wire.s2c.push(() => {
        if (wire.clientGone) return;
        events.heard();
        run();
        this.onArrived(f);
      });
    };
    const toServer = (f: Frame, run: () => void) => {
      this.onSent(f);
      wire.c2s.push(() => {
        if (wire.serverGone) return;
        run();
        this.onArrived(f);
      });
    };
    if (!server) {
      // Nothing listens: the dialler hears a reset.
      wire.s2c.push(() => {
        if (wire.clientGone) return;
        this.kill(wire, false);
        events.disconnected(Object.assign(new Error(`connect ECONNREFUSED ${address}`), { code: 'ECONNREFUSED' }));
      });
      return { openReceiver: () => ({ addCredit: () => undefined }), abandon: () => this.kill(wire, false) };
    }
    toServer(frame('c2s', 'open'), () =>
      toClient(frame('s2c', 'open'), () => {
        // The server's idle frames, at half our idle-time-out (what an AMQP peer does).
        wire.heartbeat = setInterval(() => toClient(frame('s2c', 'empty'), () => undefined), Math.max(1, Math.floor(o.idleTimeoutMs / 2)));
        events.opened({ ...server.properties });
      }),
    );
    const connection: PeerConnection = {
      openReceiver: (ro: ReceiverOptions, re: ReceiverEvents): PeerReceiver => {
        const receiver = new ScriptedReceiver(ro, re, (n) => toServer(frame('c2s', 'flow'), () => sender.flowed(n)));
        const sender: ScriptedSender = new ScriptedSender(ro.properties, {
          attach: (source, properties) => toClient(frame('s2c', 'attach'), () => re.attached({ source, properties })),
          transfer: (bytes, presettled, ref) =>
            toClient(frame('s2c', 'transfer', { bytes, streamKind: String(decodeForTest(bytes).application_properties.k) }), () =>
              receiver.transfer(bytes, presettled, (accepted) => toServer(frame('c2s', 'disposition', { accepted }), () => sender.outcome(ref, accepted))),
            ),
          detach: (error) => toClient(frame('s2c', 'detach'), () => re.detached(error)),
        });
        toServer(frame('c2s', 'attach'), () => {
          const handler = server.attach(sender);
          sender.answer();
          if (handler) {
            sender.handler = handler;
            wire.server = handler;
            receiver.start();
          }
        });
        return receiver;
      },
      abandon: () => {
        if (wire.clientGone) return;
        wire.clientGone = true;
        clearInterval(wire.heartbeat);
        // The FIN goes the way frames go (held by a partition).
        toServer(frame('c2s', 'close'), () => this.kill(wire, false));
      },
    };
    return connection;
  }

  /** The connection is over; `tellClient`: the dialler hears it as a failure (a drop). */
  private kill(wire: Wire, tellClient: boolean): void {
    if (!this.wires.delete(wire)) return;
    clearInterval(wire.heartbeat);
    wire.c2s.kill();
    wire.s2c.kill();
    const clientWasThere = !wire.clientGone;
    wire.clientGone = wire.serverGone = true;
    wire.server?.closed();
    if (tellClient && clientWasThere) wire.client.disconnected(Object.assign(new Error('connection dropped (scripted)'), { code: 'ECONNRESET' }));
  }
}

/** The dialler's receiving link: credit kept topped up to its window, or granted by hand. */
class ScriptedReceiver implements PeerReceiver {
  private issued = 0;
  private received = 0;
  private started = false;

  constructor(
    private readonly o: ReceiverOptions,
    private readonly events: ReceiverEvents,
    private readonly flow: (issued: number) => void,
  ) {}

  /** The link is served: the window's credit goes out. */
  start(): void {
    this.started = true;
    if (this.o.creditWindow > 0) this.addCredit(this.o.creditWindow);
  }

  addCredit(n: number): void {
    this.issued += n;
    this.flow(this.issued);
  }

  transfer(bytes: Buffer, presettled: boolean, disposition: (accepted: boolean) => void): void {
    this.received++;
    let settled = presettled;
    const delivery: InboundDelivery = {
      accept: () => {
        if (settled) return;
        settled = true;
        disposition(true);
      },
      reject: () => {
        if (settled) return;
        settled = true;
        disposition(false);
      },
    };
    this.events.message(decodeForTest(bytes), delivery);
    const w = this.o.creditWindow;
    if (this.started && w > 0 && w - (this.issued - this.received) >= w / 4) this.addCredit(w - (this.issued - this.received));
  }
}

/** The server's end of one link, as a PeerSender. */
class ScriptedSender implements PeerSender {
  private state: 'attaching' | 'open' | 'closed' = 'attaching';
  private accepted: { address: string; properties: Record<string, unknown> } | undefined;
  private detached = false;
  /** Sent before the attach was answered: they follow the answer. */
  private early: Array<() => void> = [];
  private issuedSeen = 0;
  private sent = 0;
  private listener: ((d: DeliveryRef, accepted: boolean) => void) | undefined;
  handler: { flow(): void; closed(): void } | undefined;

  constructor(
    readonly hello: Record<string, unknown>,
    private readonly wire: {
      attach(source: { address: unknown } | undefined, properties: Record<string, unknown>): void;
      transfer(bytes: Buffer, presettled: boolean, ref: DeliveryRef): void;
      detach(error: PeerError | undefined): void;
    },
  ) {}

  accept(address: string, properties: Record<string, unknown>): void {
    this.accepted = { address, properties };
  }

  refuse(error: PeerError): void {
    this.accepted = undefined;
    this.close(error);
  }

  /** The server decided: its attach goes out, then whatever it sent meanwhile. */
  answer(): void {
    this.wire.attach(this.accepted ? { address: this.accepted.address } : undefined, this.accepted?.properties ?? {});
    if (this.state === 'attaching') this.state = this.accepted ? 'open' : 'closed';
    for (const run of this.early.splice(0)) run();
    // Neither served nor refused: a detach all the same (a link is never left hanging).
    if (!this.accepted && !this.detached) this.close({ condition: 'amqp:not-found', description: 'not served' });
  }

  credit(): number {
    return this.state === 'closed' ? 0 : this.issuedSeen - this.sent;
  }

  flowed(issued: number): void {
    this.issuedSeen = issued;
    this.handler?.flow();
  }

  send(bytes: Buffer, presettled: boolean): DeliveryRef {
    const ref: DeliveryRef = {};
    this.sent++;
    const run = () => this.wire.transfer(bytes, presettled, ref);
    if (this.state === 'attaching') this.early.push(run);
    else if (this.state === 'open') run();
    return ref;
  }

  onOutcome(listener: (d: DeliveryRef, accepted: boolean) => void): void {
    this.listener = listener;
  }

  outcome(ref: DeliveryRef, accepted: boolean): void {
    this.listener?.(ref, accepted);
  }

  close(error?: PeerError): void {
    if (this.detached) return;
    this.detached = true;
    const run = () => this.wire.detach(error);
    if (this.state === 'attaching') this.early.push(run);
    else run();
    this.state = 'closed';
  }
}

/**
 * The stream messages' encoders write an AMQP application-properties section and a
 * data section; read back here with rhea's decoder, as a foreign client would.
 */
function decodeForTest(bytes: Buffer): { application_properties: Record<string, unknown>; body: Buffer | undefined } {
  const m = (rhea as unknown as { message: { decode(b: Buffer): { application_properties?: Record<string, unknown>; body?: unknown } } }).message.decode(bytes);
  return { application_properties: m.application_properties ?? {}, body: bodyBytes(m) };
}
