// Corrections to rhea (3.0.5) for broker use, applied once at start-up.
//
// 1. Link names: AMQP identifies a link by its name *and* direction, and clients
//    such as qpid-proton's BlockingConnection attach a sender and a receiver with
//    the same name on one session. rhea keys a session's links by name alone and
//    fails with "Attach already received". We key them by direction + name.
// 2. Message decoding: see lazy-message.ts.
// 3. Transactions (spec part 4): rhea drops a coordinator target as an unknown
//    terminus and reports a transactional-state disposition as an unrecognised
//    outcome (so a transactional acceptance would look like a bare settle). We
//    keep the coordinator target and turn transactional-state into an outcome
//    rhea dispatches as the `transactional_state` event.
// 4. Dispositions: rhea coalesces consecutive deliveries into one disposition
//    range and, when the range so far holds a single delivery, skips the check
//    that the next one has the same outcome. An accepted delivery followed by a
//    rejected one (a full queue) went out as one range "accepted": the sender was
//    told a refused message was accepted. We write incoming dispositions ourselves.
// 5. Bad input: rhea never checks a frame's declared size against max-frame-size
//    (it buffers up to 4 GiB for one frame), takes a begin before the open, and
//    after a failed SASL outcome leaves the socket open for more attempts. We
//    refuse oversize and undersize frames and a begin before open (a protocol
//    error ends the connection), and close the socket after a failed outcome.
//    rhea also accepts any revision in the protocol header and ends the socket on
//    a protocol error without a word. We refuse a revision other than 0, and
//    before the socket ends we answer as the spec says: our protocol header when
//    we have sent nothing yet (2.2: "the supported protocol header, then close"),
//    and a close with amqp:connection:framing-error once the connection is open.
// 6. Reads: when a socket read ends inside a frame, rhea keeps the partial frame and,
//    on the next read, concatenates it with the *whole* new read (64 KiB) before
//    parsing: every byte received was copied once more (5% of the broker's CPU at
//    peak). We hand rhea the bytes that complete the frame first, then the rest, as
//    if they had come in two reads: only the one frame is copied.
// 7. Logging: rhea calls its `debug` loggers with format arguments on every frame
//    and event even when they are off (1-2% of CPU). Loggers that are off become no-ops.
// 8. Frame encoding: rhea encodes each outgoing frame into a new zero-filled 1 KiB
//    buffer, which a 1 KiB transfer outgrows at once (a second, bigger zero-filled
//    buffer and a copy). We encode the frame header and performative into one reused
//    scratch buffer and copy them, with the payload, into a buffer of the exact size.
//    A payload of 16 KiB or more is not copied at all (patch 10).
// 9. Writes: rhea calls `output()` after every frame it encodes, and its transport
//    gives each frame its own socket.write: each transfer, disposition and flow was
//    a write (strace: ~26,000 in 2 s under a 1/1 load; on loopback each write also
//    runs the reader's side in the kernel). Output still runs at once (rhea changes
//    frame objects right after writing them, and callers end sockets right after),
//    but a connection's socket is corked from its first output in a tick until the
//    tick ends, so everything one input chunk or timer caused leaves in one writev.
//    `end()` uncorks, so nothing written before it waits.
// 10. Big payloads: a frame carrying 16 KiB or more (a replication batch) is written
//    as its head, then its payload as it is, and the corked socket sends both in one
//    writev: a primary no longer copies every batch once per backup.
import { createRequire } from 'node:module';
import { installLazyDecode } from './lazy-message.js';
import { Descriptor, TransactionalState, descriptorOf, readTransactionalState } from './transaction-types.js';

interface RheaLink {
  name: string;
  is_sender(): boolean;
  local: { handle: number };
  remote: { handle: number };
}

interface RheaSession {
  links: Record<string, RheaLink>;
  local: { handles: Record<number, RheaLink | undefined> };
  remote: { handles: Record<number, RheaLink | undefined> };
  create_sender(name: string): RheaLink;
  create_receiver(name: string): RheaLink;
  on_attach(frame: { performative: { name: string; role: boolean; handle: number } }): void;
}

interface PendingDisposition {
  id: number;
  settled: boolean;
  state: unknown;
  link: { session: { output(frame: unknown): void }; is_receiver(): boolean };
}

const key = (isSender: boolean, name: string): string => `${isSender ? 'sender' : 'receiver'}:${name}`;

let installed = false;

export function installRheaPatches(): void {
  if (installed) return;
  installed = true;
  installLazyDecode();
  const require = createRequire(import.meta.url);
  const Session = require('rhea/lib/session.js') as { prototype: RheaSession & Record<string, unknown> };
  const proto = Session.prototype;

  proto.create_link = function (this: RheaSession, name: string, ctor: new (...a: unknown[]) => RheaLink, opts: unknown) {
    let i = 0;
    while (this.local.handles[i]) i++;
    const l = new ctor(this, name, i, opts);
    this.links[key(l.is_sender(), name)] = l;
    this.local.handles[i] = l;
    return l;
  };

  proto.on_attach = function (this: RheaSession & { _link_on_attach?: never }, frame) {
    const { name, role } = frame.performative;
    // role true: the peer is the receiver, so our end is the sender.
    let link = this.links[key(role, name)];
    if (!link) link = role ? this.create_sender(name) : this.create_receiver(name);
    this.remote.handles[frame.performative.handle] = link;
    (link as unknown as { on_attach(f: unknown): void }).on_attach(frame);
    (link as unknown as { remote: { attach: unknown } }).remote.attach = frame.performative;
  };

  installCoalescedOutput(require);

  const terminus = require('rhea/lib/terminus.js') as { unwrap(field: unknown): unknown };
  const unwrapTerminus = terminus.unwrap;
  terminus.unwrap = (field: unknown) => {
    if (descriptorOf(field) === Descriptor.coordinator) {
      const [capabilities] = ((field as { value?: unknown[] }).value ?? []) as unknown[];
      return { coordinator: true, capabilities };
    }
    return unwrapTerminus(field);
  };

  const message = require('rhea/lib/message.js') as { unwrap_outcome(o: unknown): unknown };
  const unwrapOutcome = message.unwrap_outcome;
  message.unwrap_outcome = (outcome: unknown) => {
    const tx = readTransactionalState(outcome);
    if (tx) return new TransactionalState(tx.txnId, tx.outcome);
    return unwrapOutcome(outcome);
  };

  const frames = require('rhea/lib/frames.js') as { disposition(fields: Record<string, unknown>): unknown };
  const rheaMessage = require('rhea/lib/message.js') as { are_outcomes_equivalent(a: unknown, b: unknown): boolean };
  const writeDispositions = (deliveries: PendingDisposition[]): void => {
    let first: PendingDisposition | undefined;
    let last: PendingDisposition | undefined;
    const flush = () => {
      if (!first || !last) return;
      first.link.session.output(
        frames.disposition({ role: first.link.is_receiver(), first: first.id, last: last.id, state: first.state, settled: first.settled }),
      );
    };
    for (const d of deliveries) {
      const joins =
        first !== undefined &&
        last !== undefined &&
        d.id === last.id + 1 &&
        d.link.session === first.link.session &&
        d.settled === first.settled &&
        rheaMessage.are_outcomes_equivalent(first.state, d.state);
      if (joins) {
        last = d;
      } else if (!last || d.id !== last.id) {
        flush();
        first = d;
        last = d;
      }
    }
    flush();
  };
  let incomingPatched = false;
  const sessionProcess = proto._process as (this: RheaSession) => void;
  proto._process = function (this: RheaSession & { incoming: object }) {
    if (!incomingPatched) {
      // Incoming is private to rhea's session.js: reach its prototype through an instance.
      incomingPatched = true;
      const incoming = Object.getPrototypeOf(this.incoming) as { process(session: unknown): void };
      const original = incoming.process;
      incoming.process = function (this: { updated: PendingDisposition[] }, session: unknown) {
        if (this.updated.length > 0) {
          writeDispositions(this.updated);
          this.updated = [];
        }
        original.call(this, session);
      };
    }
    sessionProcess.call(this);
  };

  installInputGuards(require);
  installPartialFrameSplit(require);
  silenceDisabledLoggers(require);
  installExactSizeFrames(require);

  proto.remove_link = function (this: RheaSession, link: RheaLink) {
    delete this.remote.handles[link.remote.handle];
    delete this.local.handles[link.local.handle];
    delete this.links[key(link.is_sender(), link.name)];
  };
}

interface RheaInput {
  /** Size of the partial frame held in `chunks` (known once its first 4 bytes are in). */
  frame_size: number | undefined;
  received_bytes: number;
  /** Set by rhea when input fails; the socket is then ended. */
  saved_error: unknown;
  input(buff: Buffer): void;
}

/** Patch 9 (see the top of this file). */
function installCoalescedOutput(require: NodeRequire): void {
  const Connection = require('rhea/lib/connection.js') as { prototype: RheaOutput };
  const output = Connection.prototype.output;
  Connection.prototype.output = function (this: RheaOutput) {
    const socket = this.socket;
    if (!this.tandemCorked && socket && typeof socket.cork === 'function' && this.socket_ready) {
      this.tandemCorked = true;
      socket.cork();
      process.nextTick(() => {
        this.tandemCorked = false;
        socket.uncork();
      });
    }
    return output.call(this);
  };
}

interface RheaOutput {
  output(): void;
  socket?: { cork?(): void; uncork(): void };
  socket_ready?: boolean;
  tandemCorked?: boolean;
}

function installPartialFrameSplit(require: NodeRequire): void {
  const Connection = require('rhea/lib/connection.js') as { prototype: RheaInput };
  const input = Connection.prototype.input;
  Connection.prototype.input = function (this: RheaInput, buff: Buffer) {
    const missing = this.frame_size ? this.frame_size - this.received_bytes : 0;
    if (missing <= 0 || buff.length <= missing) return input.call(this, buff);
    const errorBefore = this.saved_error;
    input.call(this, buff.subarray(0, missing));
    // A protocol error in the first part ends the connection: feed it nothing more.
    if (this.saved_error === errorBefore) input.call(this, buff.subarray(missing));
  };
}

function silenceDisabledLoggers(require: NodeRequire): void {
  const log = require('rhea/lib/log.js') as Record<string, ((...args: unknown[]) => void) & { enabled?: boolean }>;
  const off = (): void => {};
  for (const [name, logger] of Object.entries(log)) if (typeof logger === 'function' && !logger.enabled) log[name] = off;
}

interface RheaWriter {
  buffer: Buffer;
  position: number;
  skip(bytes: number): void;
  write_uint(value: number, width: number): void;
  write(value: unknown): void;
}

interface RheaFrame {
  type: number;
  channel?: number;
  performative?: unknown;
  payload?: Buffer;
}

/** The scratch buffer's usual size; one grown past SCRATCH_KEEP for a huge frame is let go. */
const SCRATCH_SIZE = 16 * 1024;
const SCRATCH_KEEP = 1024 * 1024;

/** A payload this big goes to the socket as it is, after its frame's head (patch 10). */
const UNCOPIED_PAYLOAD_BYTES = 16 * 1024;

function installExactSizeFrames(require: NodeRequire): void {
  const types = require('rhea/lib/types.js') as { Writer: new (buffer?: Buffer) => RheaWriter };
  const frames = require('rhea/lib/frames.js') as { TYPE_AMQP: number; TYPE_SASL: number; write_frame(frame: RheaFrame): Buffer };
  const Transport = require('rhea/lib/transport.js') as { prototype: RheaTransportWrite };
  const writeFrame = frames.write_frame;
  const scratch = new types.Writer(Buffer.allocUnsafe(SCRATCH_SIZE));
  /** The frame's header and performative, then its payload if `withPayload`; the size field counts the payload either way. */
  const encode = (frame: RheaFrame, withPayload: boolean): Buffer => {
    scratch.position = 0;
    try {
      scratch.skip(4); // size, filled in below
      scratch.write_uint(2, 1); // doff: the 8-byte header
      scratch.write_uint(frame.type, 1);
      scratch.write_uint(frame.type === frames.TYPE_AMQP ? frame.channel ?? 0 : 0, 2);
      if (frame.performative) scratch.write(frame.performative);
      const head = scratch.position;
      const payload = frame.performative ? frame.payload : undefined;
      const out = Buffer.allocUnsafe(head + (withPayload ? payload?.length ?? 0 : 0));
      scratch.buffer.copy(out, 0, 0, head);
      if (withPayload) payload?.copy(out, head);
      out.writeUInt32BE(head + (payload?.length ?? 0), 0);
      return out;
    } finally {
      if (scratch.buffer.length > SCRATCH_KEEP) scratch.buffer = Buffer.allocUnsafe(SCRATCH_SIZE);
    }
  };
  frames.write_frame = (frame: RheaFrame): Buffer => {
    if (frame.type !== frames.TYPE_AMQP && frame.type !== frames.TYPE_SASL) return writeFrame(frame);
    return encode(frame, true);
  };
  // Patch 10: a big payload (a replication batch) is not copied into its frame: the
  // head and the payload are two writes, which the corked socket (patch 9) sends as
  // one writev. Payloads are never changed once sent (stored message bytes, encoded
  // batches), so the socket may hold on to them until they are out.
  const uncopied = (frame: RheaFrame): boolean => frame.type === frames.TYPE_AMQP && !!frame.performative && (frame.payload?.length ?? 0) >= UNCOPIED_PAYLOAD_BYTES;
  const write = Transport.prototype.write;
  Transport.prototype.write = function (this: RheaTransportWrite, socket: { write(b: Buffer): void }) {
    if (!this.pending.some(uncopied)) return write.call(this, socket);
    const pending = this.pending;
    this.pending = [];
    write.call(this, socket); // the protocol header, if it has not gone out yet
    for (const frame of pending) {
      if (uncopied(frame)) {
        socket.write(encode(frame, false));
        socket.write(frame.payload!);
      } else {
        socket.write(frames.write_frame(frame));
      }
    }
  };
}

interface RheaTransportWrite {
  pending: RheaFrame[];
  write(socket: { write(b: Buffer): void }): void;
}

/** SASL frames are a few hundred bytes; this bounds what one may claim to be. */
const SASL_FRAME_LIMIT = 65536;

interface RheaTransport {
  frame_type: number;
  header_received: unknown;
  read_complete: boolean;
  handler: { local?: { open?: { max_frame_size?: number } } };
  peek_size(buffer: Buffer): number | undefined;
  read(buffer: Buffer): number;
}

interface RheaSaslServer {
  outcome: number | undefined;
  mechanism: unknown;
  connection: { output(): void; socket?: { end(): void; remoteAddress?: string } };
  on_sasl_init(frame: unknown): void;
  do_step(challenge: unknown): void;
}

/** The connection whose sasl-init rhea is handling right now (see sasl-plain.ts). */
let initiating: RheaSaslServer['connection'] | undefined;

export function saslInitConnection(): RheaSaslServer['connection'] | undefined {
  return initiating;
}

interface RheaConnection {
  socket?: { bytesWritten: number; writableEnded: boolean; destroyed: boolean; write(b: Buffer): void };
  transport?: { header_received?: { protocol_id: number }; transports?: Record<number, unknown>; protocol_id?: number; write(socket: unknown): void };
  state: { remote_open: boolean; local_open: boolean; close_requests: number };
  open(): void;
  close(error?: { condition: string; description: string }): void;
  _process(): void;
}

/** Before rhea ends the socket for a protocol error: our header if nothing went out yet, else a close. */
function answerProtocolError(conn: RheaConnection, err: Error, condition: string): void {
  const socket = conn.socket;
  if (!socket || socket.destroyed || socket.writableEnded) return;
  try {
    if (conn.state.remote_open) {
      // The error may come in the same read as the client's open, before ours: a close needs an open first.
      if (!conn.state.local_open && conn.state.close_requests === 0) conn.open();
      conn.close({ condition, description: err?.message ?? 'protocol error' });
      conn._process(); // our open first if it was still pending, then the close
      conn.transport?.write(socket); // and our header, if it had not gone out
      return;
    }
    if (socket.bytesWritten === 0) {
      const t = conn.transport;
      const supported = t?.transports ? Object.keys(t.transports).map(Number) : [t?.protocol_id ?? 0];
      const asked = t?.header_received?.protocol_id;
      const id = asked !== undefined && supported.includes(asked) ? asked : supported.includes(3) ? 3 : supported[0]!;
      socket.write(Buffer.from([0x41, 0x4d, 0x51, 0x50, id, 1, 0, 0]));
    }
  } catch {
    // The socket is ended next in any case.
  }
}

function installInputGuards(require: NodeRequire): void {
  const { ProtocolError } = require('rhea/lib/errors.js') as { ProtocolError: new (message: string) => Error };
  const Transport = require('rhea/lib/transport.js') as { prototype: RheaTransport };
  const tp = Transport.prototype;
  const limitOf = (t: RheaTransport): number =>
    t.frame_type === 0 ? t.handler.local?.open?.max_frame_size ?? 4294967295 : SASL_FRAME_LIMIT;
  const check = (t: RheaTransport, size: number): void => {
    if (size < 8) throw new ProtocolError(`frame size ${size} is below the AMQP minimum of 8 bytes`);
    const limit = limitOf(t);
    if (size > limit) throw new ProtocolError(`frame of ${size} bytes is over max-frame-size ${limit}`);
  };
  const peekSize = tp.peek_size;
  tp.peek_size = function (this: RheaTransport, buffer: Buffer) {
    const size = peekSize.call(this, buffer);
    if (size !== undefined) check(this, size);
    return size;
  };
  const read = tp.read;
  tp.read = function (this: RheaTransport, buffer: Buffer) {
    // AMQP frames only: after a SASL outcome the rest of a SASL buffer is the next layer's.
    if (this.frame_type === 0 && !this.read_complete) {
      let offset = this.header_received ? 0 : 8;
      while (offset + 4 <= buffer.length) {
        const size = buffer.readUInt32BE(offset);
        try {
          check(this, size);
        } catch (err) {
          // Take the good frames before it first (the client's open among them), so the
          // refusal can be an AMQP close rather than a bare end of the socket.
          if (offset > 0) read.call(this, buffer.subarray(0, offset));
          throw err;
        }
        offset += size;
      }
    }
    return read.call(this, buffer);
  };

  const frames = require('rhea/lib/frames.js') as { read_header(buffer: Buffer): { protocol_id: number; revision: number } };
  const readHeader = frames.read_header;
  frames.read_header = function (buffer: Buffer) {
    const header = readHeader.call(this, buffer);
    if (header.revision !== 0) throw new ProtocolError(`Unsupported AMQP revision ${header.revision} (AMQP 1.0.0 only)`);
    return header;
  };

  const Connection = require('rhea/lib/connection.js') as {
    prototype: { on_begin(frame: unknown): void; remote: { open?: unknown }; dispatch(name: string, ...args: unknown[]): boolean };
  };
  const dispatch = Connection.prototype.dispatch;
  Connection.prototype.dispatch = function (this: RheaConnection, name: string, ...args: unknown[]) {
    // rhea ends the socket right after this event: say why first.
    // 'error' from input is a frame body that does not decode.
    if (name === 'protocol_error') answerProtocolError(this, args[0] as Error, 'amqp:connection:framing-error');
    else if (name === 'error' && args[0] instanceof Error) answerProtocolError(this, args[0], 'amqp:decode-error');
    return dispatch.call(this, name, ...args);
  };
  const onBegin = Connection.prototype.on_begin;
  Connection.prototype.on_begin = function (this: { remote: { open?: unknown } }, frame: unknown) {
    if (!this.remote.open) throw new ProtocolError('begin received before open');
    onBegin.call(this, frame);
  };

  const sasl = require('rhea/lib/sasl.js') as { Server: { prototype: RheaSaslServer } };
  const sp = sasl.Server.prototype;
  const closeIfFailed = (server: RheaSaslServer): void => {
    if (server.outcome === undefined || server.outcome === 0) return;
    // Let the outcome frame go out first, then end the connection (spec 5.3.2).
    setImmediate(() => {
      server.connection.output();
      server.connection.socket?.end();
    });
  };
  const onInit = sp.on_sasl_init;
  sp.on_sasl_init = function (this: RheaSaslServer, frame: unknown) {
    if (this.mechanism !== undefined || this.outcome !== undefined) throw new ProtocolError('sasl-init received twice');
    // rhea makes the mechanism inside on_sasl_init: its factory may ask whose it is.
    initiating = this.connection;
    try {
      onInit.call(this, frame);
    } finally {
      initiating = undefined;
    }
    closeIfFailed(this);
  };
  const doStep = sp.do_step;
  sp.do_step = function (this: RheaSaslServer, challenge: unknown) {
    doStep.call(this, challenge);
    closeIfFailed(this);
  };
}
