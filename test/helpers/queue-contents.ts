// Fill queues of a real tandemd with numbered durable messages ("<index>|<pad>") and
// find afterwards where each one is: the checks of operations a kill -9 or a failover
// cut short (each message in exactly one place, none lost, none twice).
import { expect } from 'vitest';
import { TestClient, browseBodies } from './rhea-client.js';
import { queueDepth } from './tandem-cli.js';

/** Messages large enough that a replication batch (256 KiB) ends after an enqueue, not after a dequeue. */
export const PAD = 'x'.repeat(4000);

/** Send `count` durable messages "<index>|<pad>" to `queue`, 500 at a time, each accepted. */
export async function fill(port: number, queue: string, count: number, extra: Record<string, unknown> = {}, pad = PAD): Promise<void> {
  const client = await TestClient.connect({ port });
  try {
    for (let at = 0; at < count; at += 500) {
      const n = Math.min(500, count - at);
      const outcomes = await client.send(queue, Array.from({ length: n }, (_, k) => ({ body: `${at + k}|${pad}`, durable: true, ...extra })), { timeoutMs: 60_000 });
      expect(outcomes.every((o) => o.state === 'accepted')).toBe(true);
    }
  } finally {
    await client.close();
  }
}

/** The message indexes a queue holds, in the order it delivers them (absent queue: none). */
export async function indexesIn(port: number, queue: string, timeoutMs = 60_000): Promise<number[]> {
  let depth: number;
  try {
    depth = await queueDepth(port, queue);
  } catch {
    return [];
  }
  if (depth === 0) return [];
  return (await browseBodies(port, queue, depth, timeoutMs)).map((body) => Number(body.split('|')[0]));
}

/** Add the queue to `copies` for each message index it holds. */
export async function copiesIn(port: number, queue: string, copies: Map<number, string[]>): Promise<void> {
  for (const i of await indexesIn(port, queue)) copies.set(i, [...(copies.get(i) ?? []), queue]);
}
