// The frame fuzzer (frame-fuzzer.ts) against a real tandemd, with three witnesses
// beside it: a stall probe in its own process (round trips at a fixed rate), the
// broker's resident memory, and a well-behaved durable client that sends and
// receives throughout. Verdict: the broker never exits, never stalls over 100 ms,
// stays within a memory bound, and the durable client loses nothing and sees no error.
//
// TANDEM_FUZZ_FRAMES (default 20000), TANDEM_FUZZ_SEED, TANDEM_FUZZ_CONCURRENCY and
// TANDEM_FUZZ_GUARDED=0 (leave out the kinds that need the frame guard) change the run;
// bench/fuzz.mjs runs it for a million frames and more.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { EventContext, Message } from 'rhea';
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestClient, bodyOf, type TestReceiver } from '../helpers/rhea-client.js';
import { tandem } from '../helpers/tandem-cli.js';
import { FrameFuzzer, type Conversation } from './frame-fuzzer.js';

const FRAMES = Number(process.env.TANDEM_FUZZ_FRAMES ?? 20_000);
const SEED = Number(process.env.TANDEM_FUZZ_SEED ?? 0x20f0220);
const CONCURRENCY = Number(process.env.TANDEM_FUZZ_CONCURRENCY ?? 8);
/** The inputs that need the frame guard (on main since ca020eb); TANDEM_FUZZ_GUARDED=0 leaves them out. */
const GUARDED = process.env.TANDEM_FUZZ_GUARDED !== '0';
/** How long a conversation's socket is kept when the broker has not closed it. */
const LINGER_MS = 150;
/** Resident memory the broker may grow by over the run (its queues hold the fuzzers' messages). */
const RSS_GROWTH_BOUND = 256 * 1024 * 1024;
const MiB = (bytes: number): number => Math.round(bytes / 2 ** 20);

afterAll(async () => {
  await killAllBrokers();
});

/** Write one conversation on a fresh socket; resolves once the broker closed it or LINGER_MS passed. */
function run(port: number, c: Conversation): Promise<void> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    let timer: NodeJS.Timeout | undefined;
    const done = () => {
      clearTimeout(timer);
      socket.destroy();
      resolve();
    };
    socket.on('data', () => undefined);
    socket.on('error', done);
    socket.on('close', done);
    socket.on('connect', () => {
      for (const chunk of c.chunks) socket.write(chunk);
      if (c.endAfterWrite) socket.end();
      timer = setTimeout(done, LINGER_MS);
    });
  });
}

function rssOf(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : 0;
}

interface ProbeFigures {
  roundTrips: number;
  maxMs: number;
  stalls: number;
  stallMs: number[];
  slow: number;
  maxCpuMs: number;
  lost: number;
  errors: string[];
}

function startProbe(port: number, brokerPid: number): { proc: ChildProcess; ready: Promise<void>; finish(): Promise<ProbeFigures> } {
  const proc = spawn(process.execPath, [join(import.meta.dirname, 'probe.mjs'), String(port), String(brokerPid)], { stdio: ['pipe', 'pipe', 'inherit'] });
  let out = '';
  proc.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  return {
    proc,
    ready: waitFor(() => out.startsWith('ready\n'), { name: 'stall probe ready', timeout: 20_000 }).then(() => undefined),
    async finish() {
      proc.stdin!.end();
      await exited;
      return JSON.parse(out.trim().split('\n').pop()!) as ProbeFigures;
    },
  };
}

/** A durable client that sends one message every few ms and takes each back, checking order. */
class DurableWitness {
  private readonly accepted: string[] = [];
  private readonly received: string[] = [];
  private readonly problems: string[] = [];
  private timer: NodeJS.Timeout | undefined;
  private seq = 0;
  private inFlight = 0;

  private constructor(
    private readonly client: TestClient,
    private readonly receiver: TestReceiver,
  ) {}

  static async start(port: number): Promise<DurableWitness> {
    const client = await TestClient.connect({ port });
    const receiver = await client.openReceiver('fuzz.durable');
    const w = new DurableWitness(client, receiver);
    receiver.receiver.add_credit(1_000_000);
    receiver.receiver.on('message', (ctx: EventContext) => {
      w.received.push(String(bodyOf(ctx.message as Message)));
      ctx.delivery!.accept();
    });
    receiver.receiver.on('receiver_close', () => w.problems.push('receiver closed by the broker'));
    const sender = await client.openSender('fuzz.durable');
    sender.on('accepted', () => w.inFlight--);
    sender.on('rejected', (ctx: EventContext) => w.problems.push(`rejected: ${JSON.stringify(ctx.delivery?.remote_state)}`));
    sender.on('released', () => w.problems.push('released'));
    sender.on('sender_close', () => w.problems.push('sender closed by the broker'));
    w.timer = setInterval(() => {
      if (w.inFlight > 20 || !sender.sendable()) return;
      const body = `durable-${++w.seq}`;
      w.inFlight++;
      sender.send({ durable: true, body });
      w.accepted.push(body);
    }, 5);
    return w;
  }

  /** Stop sending; wait until every message sent has come back. */
  async finish(): Promise<{ sent: number; received: string[]; problems: string[]; errors: unknown[] }> {
    clearInterval(this.timer);
    await waitFor(() => this.inFlight === 0 && this.received.length >= this.accepted.length, { name: 'durable witness catches up', timeout: 30_000 }).catch(() => undefined);
    // Drained by now; the TestReceiver's own buffer is not used.
    this.receiver.received.length = 0;
    await this.client.close();
    return { sent: this.accepted.length, received: this.received, problems: this.problems, errors: this.client.errors };
  }

  expected(): string[] {
    return this.accepted;
  }
}

describe('frame fuzz', () => {
  it(`frame fuzz - ${FRAMES} structure-aware frames (seed ${SEED}${GUARDED ? ', guarded kinds on' : ''}): no exit, no stall, bounded memory, nothing lost`, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tandem-fuzz-'));
    const usersFile = join(dir, 'users');
    const added = await tandem(['user', 'add', 'fuzzer', '--password-file', '-', '-f', usersFile], { input: 'fuzzer-pw\n' });
    expect(added.code, added.stderr).toBe(0);
    const broker = await TestBroker.start({ args: ['--users-file', usersFile, '--max-frame-size', '16384'] });
    const rssStart = rssOf(broker.pid);
    let rssMax = rssStart;
    const sampler = setInterval(() => {
      if (broker.alive) rssMax = Math.max(rssMax, rssOf(broker.pid));
    }, 200);
    const probe = startProbe(broker.port, broker.pid);
    const witness = await DurableWitness.start(broker.port);
    await probe.ready;
    // A standing backlog for the greedy consumers: they settle nothing, so what they are
    // sent comes back when their connection goes.
    const loader = await TestClient.connect({ port: broker.port });
    expect((await loader.send('fuzz.backlog', 3000)).every((o) => o.state === 'accepted')).toBe(true);
    await loader.close();
    const fuzzer = new FrameFuzzer({
      seed: SEED,
      queues: ['fuzz.q0', 'fuzz.q1', 'fuzz.q2'],
      backlog: 'fuzz.backlog',
      plain: { user: 'fuzzer', password: 'fuzzer-pw' },
      guarded: GUARDED,
    });
    let frames = 0;
    let conversations = 0;
    const startedAt = Date.now();
    try {
      const worker = async () => {
        while (frames < FRAMES && broker.alive) {
          const c = fuzzer.conversation();
          frames += c.frames;
          conversations++;
          // A long run (bench/fuzz.mjs) says how far it is.
          if (FRAMES >= 100_000 && conversations % 2000 === 0) {
            process.stderr.write(`frame fuzz: ${frames} frames, ${conversations} conversations, broker RSS ${MiB(rssOf(broker.pid))} MiB (peak ${MiB(rssMax)})\n`);
          }
          await run(broker.port, c);
        }
      };
      await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    } finally {
      clearInterval(sampler);
    }
    const fuzzedAt = Date.now();
    const figures = await probe.finish();
    const durable = await witness.finish();
    console.log(`phases: fuzz ${fuzzedAt - startedAt} ms, wind-down ${Date.now() - fuzzedAt} ms`);
    const summary = { frames, conversations, probe: figures, rssStartMiB: MiB(rssStart), rssMaxMiB: MiB(rssMax), durableSent: durable.sent };
    console.log(`frame fuzz: ${JSON.stringify(summary)}`);
    if (process.env.TANDEM_FUZZ_LOG) (await import('node:fs')).writeFileSync(process.env.TANDEM_FUZZ_LOG, broker.stdout + broker.stderr);
    expect(broker.alive, `broker exited (${broker.exitCode ?? broker.exitSignal}) after ${frames} frames: ${broker.stdout.slice(-4000)} ${broker.stderr.slice(-2000)}`).toBe(true);
    expect(broker.stdout).not.toMatch(/uncaught exception/);
    expect(frames).toBeGreaterThanOrEqual(FRAMES);
    expect(figures.errors, 'probe connection errors').toEqual([]);
    expect(figures.roundTrips, 'probe round trips').toBeGreaterThan(0);
    expect(figures.stallMs, 'round trips over 100 ms with the broker on a CPU (a stall of its event loop)').toEqual([]);
    expect(figures.lost, 'probe round trips that never came back').toBe(0);
    expect(rssMax - rssStart, 'broker memory growth').toBeLessThan(RSS_GROWTH_BOUND);
    expect(durable.problems, 'durable client saw').toEqual([]);
    expect(durable.errors, 'durable client errors').toEqual([]);
    expect(durable.received, 'durable messages, once each and in order').toEqual(witness.expected());
    // A long run from bench/ scales its time limit with its frame count.
  }, Math.max(240_000, FRAMES * 5));
});
