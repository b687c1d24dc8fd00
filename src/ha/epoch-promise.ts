// A promotion's promise to the other brokers: "a primary of epoch N is coming".
//
// A promotion asks the other brokers for their HA-STATUS (promotion-guard.ts) but used
// to tell them nothing: a backup that answered it could still follow the old primary
// if that one woke while the new one was frozen or cut off, and what the old primary
// settled with it then went aside once the new one was back (tandem ha diverged). So,
// once the guard has allowed a promotion to epoch N and before the broker serves as
// primary, it sends every broker it reaches HA-EPOCH-PROMISE {epoch: N, by}. A backup
// that holds a promise follows no primary of an older epoch (it keeps looking, and
// follows the new primary when it answers); a primary that receives one above its own
// epoch is stale and stops. The promise is kept in <data-dir>/ha-promised-epoch
// (fsynced) until the broker's own log holds that epoch or a newer one (it applied the
// new primary's epoch record, or became a primary itself).
import { closeSync, existsSync, fsyncSync, openSync, renameSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { TandemError } from '../broker/errors.js';
import { readBoundedText } from '../ops/bounded-read.js';
import type { Logger } from '../ops/log.js';
import { syncDir } from './journal-marker.js';

/**
 * The highest epoch a promise may name (as DR's MAX_EPOCH, src/dr/roles.ts): a
 * promotion raises the epoch by one, so a real cluster never gets near it, and the
 * next promotion (promise + 1) stays an exact integer whatever a peer promised.
 */
export const MAX_HA_EPOCH = 2 ** 32;

/** The hello property in which a backup tells a primary the epoch it was promised (a primary below it is stale). */
export const PROMISED_EPOCH_PROPERTY = 'tandem.promised-epoch';

/** The management operation a promoting broker sends. */
export const PROMISE_OPERATION = 'HA-EPOCH-PROMISE';

/** Broker ids are UUIDs; anything much longer is not one. */
const MAX_BY_LENGTH = 128;

const FILE = 'ha-promised-epoch';
/** The file holds one small JSON object: a larger one is not ours. */
const MAX_FILE_BYTES = 4096;

export interface PromisedEpoch {
  epoch: number;
  /** The broker id of the broker being promoted. */
  by: string;
}

export const isPromisableEpoch = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 1 && v <= MAX_HA_EPOCH;

/** The body of an HA-EPOCH-PROMISE request, checked strictly; a TandemError (amqp:invalid-field) naming what is wrong otherwise. */
export function readPromiseRequest(body: Record<string, unknown>): PromisedEpoch {
  // A ulong on the wire (2^32 itself) may arrive as a bigint.
  const raw = body.epoch;
  const epoch = typeof raw === 'bigint' && raw >= 1n && raw <= BigInt(MAX_HA_EPOCH) ? Number(raw) : raw;
  if (!isPromisableEpoch(epoch)) {
    const shown = typeof epoch === 'string' ? JSON.stringify(epoch.slice(0, 40)) : typeof epoch === 'number' || typeof epoch === 'bigint' || typeof epoch === 'boolean' ? String(epoch) : epoch === undefined || epoch === null ? 'nothing' : `a ${typeof epoch}`;
    throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', `${PROMISE_OPERATION}: epoch must be a whole number from 1 to ${MAX_HA_EPOCH}, not ${shown}`);
  }
  const by = body.by;
  if (typeof by !== 'string' || by.length === 0 || by.length > MAX_BY_LENGTH) {
    throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', `${PROMISE_OPERATION}: by must be the promoted broker's id (a string of 1 to ${MAX_BY_LENGTH} characters)`);
  }
  return { epoch, by };
}

/**
 * The promise this broker holds (epoch 0: none), kept on disk so a restart remembers
 * it: written to a temporary file, fsynced, renamed, and the directory fsynced before
 * the promise is answered.
 */
export class EpochPromise {
  private held: PromisedEpoch | undefined;
  private readonly file: string;

  constructor(
    private readonly dataDir: string,
    log: Logger,
  ) {
    this.file = join(dataDir, FILE);
    this.held = load(this.file, log);
  }

  /** The promised epoch (0: none). */
  get epoch(): number {
    return this.held?.epoch ?? 0;
  }

  /** Who it was promised by (undefined: no promise). */
  get by(): string | undefined {
    return this.held?.by;
  }

  /** Keep `p` if it is above the promise held; true when it was kept. */
  raise(p: PromisedEpoch): boolean {
    if (p.epoch <= this.epoch) return false;
    const tmp = `${this.file}.tmp`;
    const fd = openSync(tmp, 'w', 0o644);
    try {
      writeSync(fd, JSON.stringify(p));
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, this.file);
    syncDir(this.dataDir);
    this.held = p;
    return true;
  }

  /** This broker's log holds `epoch`: a promise at or below it is kept (let go). */
  keptBy(epoch: number): boolean {
    if (!this.held || epoch < this.held.epoch) return false;
    this.held = undefined;
    rmSync(this.file, { force: true });
    syncDir(this.dataDir);
    return true;
  }
}

function load(file: string, log: Logger): PromisedEpoch | undefined {
  if (!existsSync(file)) return undefined;
  try {
    // Bounded by what it reads, not a stat: a link to a device would have no size to check.
    const p = readPromiseRequest(JSON.parse(readBoundedText(file, MAX_FILE_BYTES, 'the promised epoch file')) as Record<string, unknown>);
    log.info({ promisedEpoch: p.epoch, by: p.by }, `this broker promised epoch ${p.epoch} before it stopped: it follows no primary of an older epoch`);
    return p;
  } catch (err) {
    // Unreadable: as a broker that never promised (what it was before promises were kept).
    log.warn({ file, err: (err as Error).message }, 'the promised epoch file is unreadable: ignored');
    return undefined;
  }
}
