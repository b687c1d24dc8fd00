// handshake-timeout against a real tandemd: a socket that sends the SASL protocol header
// ("AMQP" 3 1 0 0) and then nothing is answered with sasl-outcome auth and closed at the
// deadline, instead of holding a connection slot for ever, while a client that does
// its handshake connects and sends as usual meanwhile.
import { connect } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { SASL_HEADER } from '../helpers/amqp-frames.js';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { TestClient } from '../helpers/rhea-client.js';

afterAll(async () => {
  await killAllBrokers();
});

/** A socket that writes the SASL header only; resolves with what it was sent and when it closed. */
function silentAfterHeader(port: number, socket = connect({ host: '127.0.0.1', port })): Promise<{ received: Buffer; closedAfterMs: number }> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let started = 0;
    socket.on('connect', () => {
      started = Date.now();
      socket.write(SASL_HEADER);
    });
    socket.on('data', (d: Buffer) => chunks.push(d));
    socket.on('error', reject);
    socket.on('close', () => resolve({ received: Buffer.concat(chunks), closedAfterMs: Date.now() - started }));
  });
}

/** The SASL frames' descriptor codes in what the broker wrote after its header (0x40 mechanisms, 0x44 outcome), and the outcome's code. */
function saslFrames(bytes: Buffer): { codes: number[]; outcome: number | undefined } {
  const codes: number[] = [];
  let outcome: number | undefined;
  let at = 8;
  while (at + 8 <= bytes.length) {
    const size = bytes.readUInt32BE(at);
    const body = at + bytes[at + 4]! * 4;
    // 0x00 0x53 <code>: a described list with a smallulong descriptor.
    const code = bytes[body + 2]!;
    codes.push(code);
    if (code === 0x44) {
      // list8 (0xc0) or list0: size, count, then the code as a ubyte (0x50 <code>).
      const list = body + 3;
      outcome = bytes[list] === 0xc0 && bytes[list + 3] === 0x50 ? bytes[list + 4] : undefined;
    }
    at += size;
  }
  return { codes, outcome };
}

describe('handshake timeout', () => {
  it('handshake timeout - a socket that sends "AMQP" 3 1 0 0 and nothing more is closed at the deadline; a normal client connects meanwhile', async () => {
    const broker = await TestBroker.start({ args: ['--handshake-timeout', '1s'] });
    const silent = silentAfterHeader(broker.port);
    // While it waits, a client does its whole handshake and a round trip.
    const client = await TestClient.connect({ port: broker.port });
    expect((await client.send('handshake.ok', ['hello']))[0]!.state).toBe('accepted');
    const { received, closedAfterMs } = await silent;
    expect(received.subarray(0, 8).equals(SASL_HEADER)).toBe(true);
    const sasl = saslFrames(received);
    expect(sasl.codes).toEqual([0x40, 0x44]);
    expect(sasl.outcome).toBe(1);
    expect(closedAfterMs).toBeGreaterThanOrEqual(900);
    expect(closedAfterMs).toBeLessThan(8_000);
    // The client that finished its handshake is not touched by the deadline.
    await new Promise((r) => setTimeout(r, 1200));
    expect(client.closed).toBe(false);
    expect((await client.send('handshake.ok', ['still here']))[0]!.state).toBe('accepted');
    await client.close();
    expect(broker.alive).toBe(true);
  }, 30_000);

  it('handshake timeout - 0 turns it off; a bad value stops the start naming the key', async () => {
    const off = await TestBroker.start({ args: ['--handshake-timeout', '0'] });
    const socket = connect({ host: '127.0.0.1', port: off.port });
    let closed = false;
    void silentAfterHeader(off.port, socket).then(() => (closed = true));
    await new Promise((r) => setTimeout(r, 1500));
    expect(closed).toBe(false);
    socket.destroy();
    await off.stop();
    await expect(TestBroker.start({ args: ['--handshake-timeout', 'soon'] })).rejects.toThrow(/handshake-timeout/);
  }, 30_000);
});
