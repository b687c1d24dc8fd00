// A structure-aware fuzzer of AMQP 1.0 frames, seeded so that any run replays from its
// seed. Each conversation starts as a real client would (SASL ANONYMOUS or PLAIN, or a
// bare AMQP header; open, begin, attach) and then goes wrong: performatives with fields
// of the wrong type or at the edge of their range, lists that lie about their counts,
// frames that lie about their size, offset, type or channel, links and sessions out of
// order, and plain garbage. Encodings come from the tests' own encoder
// (test/helpers/amqp-frames.ts), so nothing here trusts the codec under test.
import { prng } from '../../src/util/prng.js';
import { AMQP_HEADER, CODE, SASL_HEADER, composite, frame, message, perf, plainResponse, v, type Field } from '../helpers/amqp-frames.js';

/**
 * The inputs of issue 20's cases 1, 2, 5 and 6, which the engine's state machines
 * answer (docs/amqp-engine.md, "What a client's bytes meet"): an array claiming 2^32-1
 * elements, a first transfer without a delivery-id, a disposition of every id, a
 * delivery without end, an idle-time-out at either edge. Beside them, the mutations
 * throw in list counts far past the bytes that remain, mutated delivery-ids and ranges.
 */
export const ISSUE_20_KINDS = ['array-bomb', 'transfer-without-id', 'disposition-range', 'endless-delivery', 'idle-timeout'] as const;

export interface FuzzOptions {
  seed: number;
  /** Queues the conversations attach to (a few, so auto-create does not make thousands). */
  queues: string[];
  /** A queue with a standing backlog, for greedy consumers (many links, huge credit, one session). */
  backlog: string;
  /** A user the broker knows, for SASL PLAIN (a wrong password is tried too). */
  plain?: { user: string; password: string };
  /** Largest frame a conversation offers in its open (the broker's own limit is separate). */
  maxFrameSize?: number;
}

export interface Conversation {
  /** Bytes to write, in the pieces to write them in. */
  chunks: Buffer[];
  /** Frames in it (a garbage piece counts as one). */
  frames: number;
  /** Half-close after writing (else keep the socket until the broker closes it or time runs out). */
  endAfterWrite: boolean;
}

const PERFORMATIVES = [CODE.open, CODE.begin, CODE.attach, CODE.flow, CODE.transfer, CODE.disposition, CODE.detach, CODE.end, CODE.close];

export class FrameFuzzer {
  private readonly random: () => number;
  private readonly maxFrame: number;

  constructor(private readonly options: FuzzOptions) {
    this.random = prng(options.seed);
    this.maxFrame = options.maxFrameSize ?? 16384;
  }

  // ---- randomness ------------------------------------------------------------------

  private int(n: number): number {
    return Math.floor(this.random() * n);
  }

  private chance(p: number): boolean {
    return this.random() < p;
  }

  private pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)]!;
  }

  private bytes(n: number): Buffer {
    const out = Buffer.alloc(n);
    for (let i = 0; i < n; i++) out[i] = this.int(256);
    return out;
  }

  /** A number at or near an edge of a field's range. */
  private edge(): number {
    return this.pick([0, 1, 2, 7, 255, 256, 2047, 2048, 2049, 65535, 65536, 0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff, this.int(1 << 20)]);
  }

  private text(): string {
    return this.pick([
      '',
      'x',
      'fuzz',
      '\n{"level":60,"msg":"forged"}\n',
      '\u0000\u0001\u001b[31m',
      'ä€𝄞',
      'a'.repeat(this.int(300)),
      this.options.queues[0]!,
      '$management',
    ]);
  }

  /** Any AMQP value, nested to `depth`. */
  private value(depth = 2): Buffer {
    const kind = this.int(depth > 0 ? 19 : 16);
    switch (kind) {
      case 0: return v.null();
      case 1: return v.bool(this.chance(0.5));
      case 2: return v.ubyte(this.edge());
      case 3: return v.ushort(this.edge());
      case 4: return v.uint(this.edge());
      case 5: return v.ulong(this.pick([0n, 1n, 0xffffffffn, 0x100000000n, 2n ** 53n + 1n, 2n ** 64n - 1n]));
      case 6: return v.int(this.pick([-1, -2147483648, 2147483647, 0]));
      case 7: return v.long(this.pick([-1n, -(2n ** 63n), 2n ** 63n - 1n]));
      case 8: return v.timestamp(this.pick([0, -1, 8.64e15]));
      case 9: return v.uuid(this.bytes(16));
      case 10: return v.binary(this.bytes(this.int(64)));
      case 11: return v.string(this.text());
      case 12: return v.symbol(this.pick(['amqp:accepted:list', 'x', '', 'amqp:link:detach-forced', this.text()]));
      case 13: return this.fixedWidth();
      case 14: return v.array32(this.pick([0x40, 0x41, 0x43, 0x44, 0x45]), this.int(16));
      case 15: return v.array32(0x52, 3, Buffer.from([1, 2, 3]));
      case 16: return v.list(Array.from({ length: this.int(5) }, () => this.value(depth - 1)));
      case 17: return v.map(Array.from({ length: 2 * this.int(3) }, () => this.value(depth - 1)));
      default: return v.described(this.chance(0.5) ? this.int(0x80) : v.symbol(this.text()), this.value(depth - 1));
    }
  }

  /** A fixed-width value of a type no performative field has (decimal, char, double...). */
  private fixedWidth(): Buffer {
    const [code, width] = this.pick([[0x74, 4], [0x84, 8], [0x94, 16], [0x72, 4], [0x82, 8], [0x73, 4], [0x51, 1], [0x61, 2], [0x55, 1], [0x56, 1]] as const);
    return Buffer.concat([Buffer.from([code]), this.bytes(width)]);
  }

  // ---- the well-formed parts ------------------------------------------------------

  private handshake(): Buffer[] {
    const open = perf.open({ containerId: `fuzz-${this.int(1e9)}`, maxFrameSize: this.maxFrame, channelMax: this.pick([0, 1, 3, 65535]) });
    const sasl = this.int(10);
    if (sasl < 4) return [AMQP_HEADER, open];
    const mechanism = sasl < 9 || !this.options.plain ? 'ANONYMOUS' : 'PLAIN';
    const response =
      mechanism === 'PLAIN'
        ? plainResponse(this.options.plain!.user, this.chance(0.7) ? this.options.plain!.password : 'wrong')
        : Buffer.from('fuzz@example');
    // Pipelined, as proton does: the AMQP layer follows the SASL init without waiting.
    return [SASL_HEADER, perf.saslInit(mechanism, response), AMQP_HEADER, open];
  }

  /** Fields of a well-formed performative for an established session with links 0 and 1. */
  private fields(code: number, state: { deliveryId: number }): Field[] {
    switch (code) {
      case CODE.begin:
        return [undefined, v.uint(0), v.uint(2048), v.uint(2048)];
      case CODE.attach: {
        const receiver = this.chance(0.5);
        const address = this.pick(this.options.queues);
        return [
          v.string(`l${this.int(4)}`), v.uint(this.int(3)), v.bool(receiver), this.chance(0.5) ? v.ubyte(1) : undefined, undefined,
          composite(CODE.source, receiver ? [v.string(address)] : []), composite(CODE.target, receiver ? [] : [v.string(address)]),
          undefined, undefined, receiver ? undefined : v.uint(0),
        ];
      }
      case CODE.flow:
        return [v.uint(0), v.uint(2048), v.uint(0), v.uint(2048), v.uint(this.int(3)), v.uint(0), v.uint(this.int(100)), undefined, v.bool(false)];
      case CODE.transfer: {
        const id = state.deliveryId++;
        return [v.uint(0), v.uint(id), v.binary(Buffer.from(String(id))), v.uint(0), v.bool(this.chance(0.7))];
      }
      case CODE.disposition:
        return [v.bool(true), v.uint(this.int(4)), undefined, v.bool(true), composite(this.pick([CODE.accepted, CODE.released, CODE.rejected, CODE.modified]), [])];
      case CODE.detach:
        return [v.uint(this.int(3)), v.bool(this.chance(0.5))];
      case CODE.open:
        return [v.string('again')];
      default:
        return [];
    }
  }

  private payload(): Buffer {
    switch (this.int(7)) {
      case 0: return this.bytes(this.int(200));
      case 1: return Buffer.concat([v.described(CODE.properties, this.value()), v.described(CODE.amqpValue, this.value())]);
      case 2: return v.described(this.pick([CODE.header, CODE.applicationProperties, CODE.data, CODE.footer]), this.value());
      case 3: return this.deeplyDescribed();
      default: return message(`fuzz-${this.int(1e6)}`, { durable: this.chance(0.2) });
    }
  }

  /**
   * An amqp-value section whose value is described within described, thousands deep,
   * whole or cut short: what random bytes never make, and what ran a recursive sizing
   * of the broker's out of stack. Sized to fit a frame.
   */
  private deeplyDescribed(): Buffer {
    const room = this.maxFrame - 512;
    const whole = this.chance(0.5);
    const depth = whole ? Math.floor((room - 1) / 2) : room;
    return Buffer.concat([Buffer.from([0x00, 0x53, CODE.amqpValue]), Buffer.alloc(depth, 0x00), whole ? Buffer.alloc(depth + 1, 0x40) : Buffer.from([0x40])]);
  }

  // ---- mutations --------------------------------------------------------------------

  /** One performative, well-formed or mutated in its fields, counts or descriptor. */
  private performative(code: number, state: { deliveryId: number }): Buffer {
    const fields = this.fields(code, state);
    switch (this.int(8)) {
      case 0: case 1: case 2: {
        // A field of another type, or at an edge of its own.
        const i = this.int(Math.max(1, fields.length + 2));
        fields[i] = this.chance(0.5) ? this.value() : v.uint(this.edge());
        break;
      }
      case 3:
        fields.length = this.int(fields.length + 1);
        break;
      case 4:
        for (let k = this.int(4); k > 0; k--) fields.push(this.value());
        break;
      case 5: {
        // A list whose count lies (more or fewer items than it says).
        const items = Array.from(fields, (f) => f ?? v.null());
        // Some far past the bytes that remain: refused before any item is read.
        const count = Math.max(0, items.length + this.pick([-2, -1, 1, 2, 255, 0xffffff]));
        return v.described(code, v.list(items, count));
      }
      case 6: {
        // Another performative's descriptor on these fields, or a value that is not a list.
        return v.described(this.chance(0.5) ? this.pick(PERFORMATIVES) : this.int(0x100), this.chance(0.5) ? this.value() : v.list(Array.from(fields, (f) => f ?? v.null())));
      }
      default:
        break; // well-formed
    }
    return composite(code, fields);
  }

  /** A frame around a body, its header sometimes lying. */
  private frameOf(body: Buffer, payload?: Buffer): Buffer {
    const f = frame(body, { channel: this.chance(0.9) ? 0 : this.pick([1, 2, 65535]), payload });
    switch (this.int(12)) {
      case 0: f.writeUInt32BE(Math.max(8, f.length - 1 - this.int(Math.min(8, f.length - 8))), 0); return f; // says it is shorter
      case 1: f.writeUInt32BE(f.length + 1 + this.int(16), 0); return f; // says it is longer
      case 2: f[4] = this.pick([0, 1, 3, 255]); return f; // data offset
      case 3: f[5] = this.pick([1, 2, 0xff]); return f; // frame type
      default: return f;
    }
  }

  private issue20Frame(kind: (typeof ISSUE_20_KINDS)[number], state: { deliveryId: number }): Buffer[] {
    switch (kind) {
      case 'array-bomb':
        return [frame(composite(this.pick(PERFORMATIVES), [v.array32(this.pick([0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x74, 0x84, 0x94, 0x98]), 0xffffffff)]))];
      case 'transfer-without-id':
        return [frame(composite(CODE.transfer, [v.uint(0)]), { payload: message('no id') })];
      case 'disposition-range':
        return [frame(composite(CODE.disposition, [v.bool(true), v.uint(0), v.uint(0xffffffff), v.bool(true)]))];
      case 'endless-delivery': {
        const id = state.deliveryId++;
        return Array.from({ length: 20 + this.int(40) }, (_, i) =>
          frame(composite(CODE.transfer, [v.uint(0), i === 0 ? v.uint(id) : undefined, i === 0 ? v.binary(Buffer.from(String(id))) : undefined, undefined, undefined, v.bool(true)]), {
            payload: this.bytes(1000),
          }),
        );
      }
      case 'idle-timeout':
        return [perf.open({ idleTimeOut: this.pick([1, 0xffffffff]) })];
    }
  }

  // ---- conversations -----------------------------------------------------------------

  /**
   * A management request with ids of any type (a reply can carry only some), any
   * reply-to, and an operation that is real or not.
   */
  private managementRequest(state: { deliveryId: number }): Buffer {
    const id = this.chance(0.7) ? this.value(1) : undefined;
    const correlation = this.chance(0.5) ? this.value(1) : undefined;
    const replyTo = this.chance(0.8) ? v.string(this.pick([...this.options.queues, 'nowhere', this.text()])) : undefined;
    const properties = composite(CODE.properties, [id, undefined, undefined, undefined, replyTo, correlation]);
    const operation = this.pick(['QUERY', 'READ', 'CREATE', 'DELETE', 'PURGE', 'HA-STATUS', 'DR-LIST', 'NOPE', this.text()]);
    const type = this.pick(['queue', 'exchange', 'binding', 'connection', 'broker', this.text()]);
    const applicationProperties = v.described(
      CODE.applicationProperties,
      v.map([v.string('operation'), v.string(operation), v.string('type'), v.string(type), v.string('name'), this.chance(0.5) ? v.string(`fuzz.mgmt${this.int(3)}`) : this.value(1)]),
    );
    const body = v.described(CODE.amqpValue, this.chance(0.7) ? v.map([]) : this.value());
    const delivery = state.deliveryId++;
    return frame(composite(CODE.transfer, [v.uint(0), v.uint(delivery), v.binary(Buffer.from(String(delivery))), v.uint(0), v.bool(this.chance(0.5))]), {
      payload: Buffer.concat([properties, applicationProperties, body]),
    });
  }

  /** Several consumer links on one session, each granted far more credit than the session has slots. */
  private greedyConsumers(): Buffer[] {
    const links = 2 + this.int(3);
    const out: Buffer[] = [];
    for (let h = 1; h <= links; h++) {
      out.push(perf.attach({ name: `g${h}`, handle: h, role: 'receiver', address: this.options.backlog, presettled: this.chance(0.2) }));
      out.push(perf.flow({ handle: h, credit: this.pick([1500, 2048, 5000, 0x7fffffff, 0xffffffff]), incomingWindow: this.pick([0x7fffffff, 2048, 100]) }));
    }
    return out;
  }

  /** One client's worth of input. */
  conversation(): Conversation {
    const state = { deliveryId: 0 };
    const chunks = this.handshake();
    let frames = chunks.length - 1;
    const kind = this.int(10);
    const management = kind === 0;
    const begin = perf.begin();
    const target = management ? '$management' : this.pick(this.options.queues);
    const attach = perf.attach({ name: 'l0', handle: 0, role: 'sender', address: target, presettled: this.chance(0.5) });
    chunks.push(begin, attach);
    frames += 2;
    if (kind === 1) {
      const greedy = this.greedyConsumers();
      chunks.push(...greedy);
      frames += greedy.length;
    } else if (this.chance(0.3)) {
      chunks.push(perf.attach({ name: 'r1', handle: 1, role: 'receiver', address: this.pick(this.options.queues), presettled: this.chance(0.5) }), perf.flow({ handle: 1, credit: this.int(50) }));
      frames += 2;
    }
    const length = 5 + this.int(40);
    for (let n = 0; n < length; n++) {
      const roll = this.int(100);
      if (roll < 3) {
        chunks.push(this.bytes(1 + this.int(64))); // garbage
      } else if (roll < 6) {
        const last = chunks[chunks.length - 1]!;
        chunks[chunks.length - 1] = last.subarray(0, this.int(last.length)); // cut short
      } else if (roll < 8) {
        const more = this.issue20Frame(this.pick(ISSUE_20_KINDS), state);
        chunks.push(...more);
        frames += more.length - 1;
      } else if (roll < 50 && management) {
        chunks.push(this.managementRequest(state));
      } else if (roll < 50) {
        // Transfers are what clients send most; their payloads are mutated too.
        const body = this.performative(CODE.transfer, state);
        chunks.push(this.frameOf(body, this.payload()));
      } else {
        chunks.push(this.frameOf(this.performative(this.pick(PERFORMATIVES), state)));
      }
      frames++;
    }
    if (this.chance(0.5)) {
      chunks.push(perf.close());
      frames++;
    }
    return { chunks, frames, endAfterWrite: this.chance(0.5) };
  }
}
