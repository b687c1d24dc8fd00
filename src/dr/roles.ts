// What a DR queue is on this broker, in words (dr status, metrics, refusals).
//
//   source        serves clients, and a passive copy elsewhere follows it
//   passive copy  fed by the bridge from the other site; refuses clients
//   activated     serves clients after activation or a switchover; nobody follows it yet
//   fenced        a source handing over in a switchover; refuses clients
//   diverged      a source whose other site was activated without it; refuses
//                 clients until `tandem dr reattach`
import type { DrQueueConfig } from '../broker/broker.js';
import { TandemError } from '../broker/errors.js';
import { displaySource } from './config.js';

/**
 * The highest DR epoch a peer may name. An epoch is raised by one at each activation or
 * switchover, so a real pair never gets near it; above it, epoch + 1 would soon be no
 * exact integer (2^53), and the pair could never move again.
 */
export const MAX_EPOCH = 2 ** 32;

/** A DR queue's role before it was ever moved: epoch 1, nothing activated. */
export const FRESH_ROLE = { epoch: 1, divergence: 0, since: 0, idFloor: 0, fill: false, exchanges: '*', tell: false } as const;

export type DrRole = 'source' | 'passive copy' | 'activated' | 'fenced' | 'diverged';

export const DR_ROLES: readonly DrRole[] = ['source', 'passive copy', 'activated', 'fenced', 'diverged'];

export function roleOf(c: DrQueueConfig | undefined, followed: boolean): DrRole {
  if (!c) return 'source';
  switch (c.state) {
    case 'passive':
      return 'passive copy';
    case 'fenced':
      return 'fenced';
    case 'diverged':
      return 'diverged';
    case 'active':
      return followed ? 'source' : 'activated';
  }
}

/** The pair's epoch on this side: a queue that never moved is at epoch 1. */
export function epochOf(c: DrQueueConfig | undefined): number {
  return c?.epoch ?? 1;
}

/** The quarantine of a reattached queue: what its old site held that never crossed. */
export function quarantineOf(queue: string): string {
  return `${queue}.dr-diverged`;
}

/**
 * Why clients may not use `queue` here: amqp:link:redirect (the queue is served
 * elsewhere, retry there), with a message that names the site that serves it.
 */
export function drRefusal(queue: string, c: DrQueueConfig): TandemError {
  const other = displaySource(c.source);
  switch (c.state) {
    case 'fenced':
      return new TandemError('TANDEM_ERR_DR_MOVED', `queue '${queue}' is moving to the DR site ${other} (switchover to epoch ${c.epoch}): retry there`);
    case 'diverged':
      return new TandemError(
        'TANDEM_ERR_DR_MOVED',
        `queue '${queue}' was activated at the DR site ${other || '(the other site)'} (epoch ${c.epoch}): it is served there; this site refuses it until 'tandem dr reattach ${queue}'`,
      );
    case 'passive':
      if (c.epoch > 1) return new TandemError('TANDEM_ERR_DR_MOVED', `queue '${queue}' is served by the DR site ${other} (this site holds its passive copy, epoch ${c.epoch}): retry there`);
      return new TandemError('TANDEM_ERR_DR_MOVED', `queue '${queue}' is a passive DR replica of ${other}, which serves it: it serves clients here only after 'tandem dr activate ${queue}' or a switchover`);
    case 'active':
      throw new Error(`drRefusal: '${queue}' serves clients`);
  }
}
