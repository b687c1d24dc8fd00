// Message groups of one queue (queue argument qpid.message-groups): the AMQP group-id
// (JMSXGroupID) of its messages, interned to small numbers a queue row can hold in a
// typed-array column, and who owns each group.
//
// The rule is qpidd's "owned while held": a group belongs to a consumer while that
// consumer holds at least one acquired (unsettled) message of it; nobody else is given
// a message of the group meanwhile; when the owner holds none any more (it settled,
// released or gave them all back at its detach) the group is free. Nothing outlives the
// messages held, so nothing sticky needs journaling or replicating: after a restart or a
// failover every message is available again and no group is owned.
//
// A group-id is peer-supplied: one longer than MAX_GROUP_ID_BYTES is keyed by its first
// bytes, and past MAX_GROUPS distinct groups new ones share one overflow group. Both
// merge groups, which keeps the rule (a merged group is still at one consumer at a time,
// in order), only with less parallelism; a group's slot is freed with its last message.
import type { Consumer } from './queue.js';

/** Row value of a message whose group is not known yet (a paged row recovery made, read at its first look). */
export const GROUP_UNKNOWN = 0;
/** Row value of a message without a group-id: dispatched as on any queue. */
export const GROUP_NONE = 1;
/** Row values from here on are groups (slot + FIRST_GROUP). */
const FIRST_GROUP = 2;

/** Bytes of a group-id that key its group (the rest is not looked at). */
export const MAX_GROUP_ID_BYTES = 256;
/** Distinct groups a queue keeps apart; the ones past it share a group. */
export const MAX_GROUPS = 1_000_000;
/** The key of the group the groups past MAX_GROUPS share (no group-id is keyed so: the keys are latin1 of their bytes, at most MAX_GROUP_ID_BYTES). */
const OVERFLOW_KEY = '\u0000overflow\u0000'.repeat(32);

export class MessageGroups {
  private readonly slotOf = new Map<string, number>();
  /** Per slot: its key ('' when free), messages of it on the queue, its owner, how many of them the owner holds, and a lower bound of its available ids. */
  private readonly keys: string[] = [];
  private readonly messages: number[] = [];
  private readonly owners: Array<Consumer | undefined> = [];
  private readonly held: number[] = [];
  private readonly lowest: number[] = [];
  private readonly freeSlots: number[] = [];
  /** Messages that found the table full and went to the overflow group (for status). */
  overflowed = 0;

  constructor(private readonly maxGroups = MAX_GROUPS) {}

  /** Groups with messages on the queue now. */
  get size(): number {
    return this.slotOf.size;
  }

  /** Groups owned now (a consumer holds messages of each). */
  get owned(): number {
    let n = 0;
    for (const o of this.owners) if (o !== undefined) n++;
    return n;
  }

  /**
   * A new message of the group keyed `key` (from groupKey) is on the queue at `id`:
   * its row value, counted until leave().
   */
  enter(key: string, id: number): number {
    let slot = this.slotOf.get(key);
    if (slot === undefined) {
      if (this.slotOf.size >= this.maxGroups && key !== OVERFLOW_KEY) {
        // The overflow group itself may take the one slot past the bound.
        this.overflowed++;
        return this.enter(OVERFLOW_KEY, id);
      }
      slot = this.freeSlots.pop() ?? this.keys.length;
      this.slotOf.set(key, slot);
      this.keys[slot] = key;
      this.messages[slot] = 0;
      this.owners[slot] = undefined;
      this.held[slot] = 0;
      this.lowest[slot] = id;
    }
    this.messages[slot]!++;
    if (id < this.lowest[slot]!) this.lowest[slot] = id;
    return slot + FIRST_GROUP;
  }

  /** A message of group `value` left the queue: its slot goes with its last message. */
  leave(value: number): void {
    const slot = value - FIRST_GROUP;
    if (--this.messages[slot]! > 0) return;
    this.slotOf.delete(this.keys[slot]!);
    this.keys[slot] = '';
    this.owners[slot] = undefined;
    this.held[slot] = 0;
    this.freeSlots.push(slot);
  }

  /** Whether a consumer other than `c` owns group `value` (GROUP_NONE: never). */
  ownedByOther(value: number, c: Consumer): boolean {
    if (value < FIRST_GROUP) return false;
    const owner = this.owners[value - FIRST_GROUP];
    return owner !== undefined && owner !== c;
  }

  /** `c` acquired a message of group `value`: it owns the group (it was free or its own). */
  acquire(value: number, c: Consumer): void {
    const slot = value - FIRST_GROUP;
    this.owners[slot] = c;
    this.held[slot]!++;
  }

  /** The owner no longer holds a message of group `value` (settled, released); true when that frees the group. */
  unhold(value: number): boolean {
    const slot = value - FIRST_GROUP;
    if (--this.held[slot]! > 0) return false;
    this.held[slot] = 0;
    this.owners[slot] = undefined;
    return true;
  }

  /** A message of group `value` is available at `id` again (put back): the bound comes down to it. */
  available(value: number, id: number): void {
    const slot = value - FIRST_GROUP;
    if (id < this.lowest[slot]!) this.lowest[slot] = id;
  }

  /** Every available message of group `value` has an id at least this (a bound, not the first id itself). */
  lowestAvailable(value: number): number {
    return this.lowest[value - FIRST_GROUP]!;
  }

  /** No available message of group `value` is below `id` any more (the queue took its first row): the bound goes up. */
  raiseLowest(value: number, id: number): void {
    const slot = value - FIRST_GROUP;
    if (id > this.lowest[slot]!) this.lowest[slot] = id;
  }

  /** Forget everything (the queue's messages went). */
  clear(): void {
    this.slotOf.clear();
    this.keys.length = 0;
    this.messages.length = 0;
    this.owners.length = 0;
    this.held.length = 0;
    this.lowest.length = 0;
    this.freeSlots.length = 0;
  }
}

/** Whether a row value is a group (not GROUP_NONE or GROUP_UNKNOWN). */
export function isGroup(value: number): boolean {
  return value >= FIRST_GROUP;
}
