// What the HA and DR stream fuzzes share: a peer message as the peer link's decoder
// hands it over, one framed as a source frames it, and one decode attempt judged.
import { expect } from 'vitest';
import { decodeMessage } from '../../src/amqp/engine/message.js';
import { applicationPropertiesSection, DATA_SECTION_HEADER, writeDataSectionHeader } from '../../src/peer-link/sections.js';

/** What a peer link's decoder hands a stream decoder for these bytes (engine-dialer.ts onTransfer). */
export function onWire(bytes: Buffer): { application_properties: Record<string, unknown>; body: Buffer | undefined } {
  const m = decodeMessage(bytes);
  return { application_properties: m.applicationProperties, body: Buffer.isBuffer(m.body) ? m.body : undefined };
}

/** Stream message bytes with these properties and this body, framed as a primary or DR source frames them. */
export function framed(props: Record<string, unknown>, body: Buffer): Buffer {
  const head = applicationPropertiesSection(props);
  const out = Buffer.alloc(head.length + DATA_SECTION_HEADER + body.length);
  head.copy(out, 0);
  writeDataSectionHeader(out, head.length, body.length);
  body.copy(out, head.length + DATA_SECTION_HEADER);
  return out;
}

export const u32be = (n: number): Buffer => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n >>> 0, 0);
  return b;
};

export type Outcome<T> = { ok: T } | { error: unknown };

/** Decode, timed (`caseMs`: far above it is a stall); an exception that is not a plain Error with a message fails the case. */
export function attempt<T>(run: () => T, where: () => string, caseMs: number): Outcome<T> {
  const t0 = performance.now();
  let out: Outcome<T>;
  try {
    out = { ok: run() };
  } catch (error) {
    out = { error };
  }
  const ms = performance.now() - t0;
  expect(ms, `took ${ms} ms: ${where()}`).toBeLessThan(caseMs);
  if ('error' in out) {
    const e = out.error as Error;
    expect(e, where()).toBeInstanceOf(Error);
    expect([TypeError, RangeError, ReferenceError].some((c) => e instanceof c), `${e.constructor?.name}: ${e.message} at ${where()}`).toBe(false);
    expect(e.message.length, where()).toBeGreaterThan(0);
  }
  return out;
}

/** framed() then onWire(), or undefined when the engine cannot encode these properties (then only an Error may say so). */
export function wireOf(props: Record<string, unknown>, body: Buffer, where: () => string): ReturnType<typeof onWire> | undefined {
  try {
    return onWire(framed(props, body));
  } catch (error) {
    expect(error, where()).toBeInstanceOf(Error);
    return undefined;
  }
}
